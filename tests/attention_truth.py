"""The truth for the provided model's attention, computed in the harness (never by the submission).

Read by the torch_compile tests (visible and hidden): what a compiled attention must equal is
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
