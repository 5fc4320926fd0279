"""Probe for the §1.6 gradient_checkpointing tests: one checkpointed forward and backward of the provided LM.

Read by tests/checks/gradient_checkpointing_checks.py, which sends the LM's overrides, its initial
state and the tokens, and judges what comes back against its own plain run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .benchmarking_script import caught


def run(load_adapters: Callable[[], Any], overrides: dict, state: dict, inputs: torch.Tensor, targets: torch.Tensor,
        block_size: int) -> dict:
    """Returns {"outcome": caught(logits), "grads", "layer_calls" (forward calls of each layer),
    "order" (the index of each layer call, in the order they ran, recomputations included),
    "saved_bytes" (bytes autograd saved outside any checkpoint during the forward)}."""
    adapters = load_adapters()
    model = adapters.get_transformer_lm(model_overrides=overrides)
    model.load_state_dict(state)
    calls = [0] * len(model.layers)
    order: list[int] = []

    def called(i: int) -> None:
        calls[i] += 1
        order.append(i)

    hooks = [layer.register_forward_pre_hook(lambda module, args, i=i: called(i)) for i, layer in enumerate(model.layers)]
    saved = {"bytes": 0}

    def pack(tensor):
        saved["bytes"] += tensor.numel() * tensor.element_size()
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            outcome = caught(adapters.run_checkpointed_lm_forward, model, inputs, block_size)
        grads = None
        if "value" in outcome and isinstance(outcome["value"], torch.Tensor) and outcome["value"].requires_grad:
            logits = outcome["value"]
            F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
            outcome = {"value": logits.detach()}
            grads = {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}
    finally:
        for hook in hooks:
            hook.remove()
    return {"outcome": outcome, "grads": grads, "layer_calls": calls, "order": order, "saved_bytes": saved["bytes"]}


PROBES = {"run": run}
