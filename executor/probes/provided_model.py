"""Probes for the tests of the provided Transformer LM: what needs the model's own parameters,
submodules or context managers, which stay next to the submission. Each returns plain numbers
or tensors for the tests to judge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def size(load_adapters: Callable[[], Any], name: str) -> dict:
    """Model size ``name`` built on the meta device: {"parameters": count, "num_heads": of layer 0's attention}."""
    model = load_adapters().get_transformer_lm(name, device="meta")
    return {"parameters": sum(p.numel() for p in model.parameters()), "num_heads": model.layers[0].attn.num_heads}


def use_attention(load_adapters: Callable[[], Any], model_overrides: dict, tokens: torch.Tensor, seed: int) -> dict:
    """Logits of a seeded model on ``tokens`` (no grad): before, inside ``use_attention(recorder)``
    (a recorder around the model's attention), and after. Returns {"expected", "swapped",
    "after", "recorder_calls": calls of the recorder in all}."""
    adapters = load_adapters()
    torch.manual_seed(seed)
    model = adapters.get_transformer_lm(model_overrides=model_overrides)
    inner = adapters.get_scaled_dot_product_attention()
    calls = []

    def recorder(Q, K, V, mask=None):
        calls.append(1)
        return inner(Q, K, V, mask)

    with torch.no_grad():
        expected = model(tokens)
        with adapters.get_use_attention()(recorder):
            swapped = model(tokens)
        after = model(tokens)
    return {"expected": expected, "swapped": swapped, "after": after, "recorder_calls": len(calls)}


def adamw_losses(load_adapters: Callable[[], Any], model_overrides: dict, tokens: torch.Tensor, seed: int,
                 steps: int, lr: float) -> list[float]:
    """The next-token cross-entropy before each of ``steps`` AdamW steps on one batch of a seeded model."""
    torch.manual_seed(seed)
    model = load_adapters().get_transformer_lm(model_overrides=model_overrides)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


PROBES = {"size": size, "use_attention": use_attention, "adamw_losses": adamw_losses}
