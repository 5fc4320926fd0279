"""The truth for the provided model's attention, computed in the harness (never by the submission).

Read by the torch_compile tests (visible and hidden): what a compiled attention (or model) must equal is
computed here, from the inputs the test made, so nothing the submission's process returns or
rewrites can decide it. The formula is the provided model's contract
(``cs336_systems/model.py`` ``scaled_dot_product_attention``): softmax(Q K^T / sqrt(d_k)) V, with
scores where ``mask`` is False set to -inf before the softmax.
"""

from __future__ import annotations

import math

import torch


def model_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None,
                    *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The provided attention on (..., queries, d) / (..., keys, d) inputs, computed in ``dtype``
    (default: the inputs' own, which keeps the eager rounding); differentiable through Q, K, V."""
    work = dtype or Q.dtype
    q, k, v = (t.to(work) for t in (Q, K, V))
    scores = q @ k.transpose(-1, -2) / math.sqrt(Q.shape[-1])  # (..., queries, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(V.dtype)  # (..., queries, d_v)


def require_compiled(seen: dict) -> None:
    """Fail unless the probe saw ``get_compiled_attention`` call torch.compile once on the model's
    attention and return what it returned (§2.2): matching the truth without compiling earns nothing."""
    if seen.get("calls") != 1 or not seen.get("returned_it"):
        raise AssertionError(
            "get_compiled_attention must return torch.compile(scaled_dot_product_attention) (handout §2.2); "
            f"torch.compile was called {seen.get('calls')} times and what it returned was "
            f"{'' if seen.get('returned_it') else 'not '}returned. An eager function earns no torch_compile points."
        )


def eager_model_truth(overrides: dict, state: dict[str, torch.Tensor], tokens: torch.Tensor):
    """The provided model's eager logits on ``tokens`` and the gradients of ``logits.float().square().mean()``
    ({parameter name: gradient}), for the "small" size with ``overrides`` and the parameters ``state``:
    built here from the kit's own copy of the provided model, on ``tokens``' device."""
    from cs336_systems.model_sizes import build_model  # the kit's provided code, imported by the harness

    model = build_model("small", overrides=overrides, device=tokens.device)
    missing = set(dict(model.named_parameters())) ^ set(state)
    if missing:
        raise AssertionError(f"the model's parameters are not the provided model's: {sorted(missing)[:5]}")
    model.load_state_dict(state, strict=False)
    logits = model(tokens)
    names, parameters = zip(*model.named_parameters())
    grads = torch.autograd.grad(logits.float().square().mean(), parameters)
    return logits.detach(), dict(zip(names, (g.detach() for g in grads)))
