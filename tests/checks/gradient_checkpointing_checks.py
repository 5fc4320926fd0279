"""Checks of §1.6 gradient_checkpointing, for its visible and hidden tests.

The harness builds the kit's own provided LM, runs a plain forward and backward, and compares
a checkpointed run of the submission (executor/probes/gradient_checkpointing.py) with it:
the same logits and gradients, every layer run twice (forward, then recomputed in the
backward), and fewer bytes saved for the backward outside the checkpoints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.assertions import assert_close
from executor.probes import run_probe
from tests.checks.model_spies import outcome_value

OVERRIDES = {"d_model": 16, "d_ff": 24, "num_layers": 4, "num_heads": 2, "vocab_size": 50, "context_length": 16}


def _plain(seed: int):
    from cs336_systems.model_sizes import build_model  # the kit's provided model; never the submission

    torch.manual_seed(seed)
    model = build_model("small", overrides=OVERRIDES)
    tokens = torch.randint(0, OVERRIDES["vocab_size"], (2, 12))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    saved = {"bytes": 0}

    def pack(tensor):
        saved["bytes"] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(inputs)
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    state = {name: value.detach().clone() for name, value in model.state_dict().items()}
    return state, inputs, targets, logits.detach(), grads, saved["bytes"]


def check_checkpointed_forward(adapters, block_size: int, seed: int = 0) -> None:
    state, inputs, targets, logits, grads, plain_bytes = _plain(seed)
    seen = run_probe(adapters, "gradient_checkpointing.run", OVERRIDES, state, inputs, targets, block_size)
    got = outcome_value(seen["outcome"])
    what = f"checkpointed_lm_forward(block_size={block_size}) on the provided LM with {OVERRIDES['num_layers']} layers"
    assert isinstance(got, torch.Tensor) and got.shape == logits.shape, (
        f"{what} must return logits of shape {tuple(logits.shape)}; got "
        f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert seen["grads"] is not None, f"{what}: the logits must require grad (keep the graph to the parameters)"
    assert_close(got, logits, atol=1e-5, rtol=1e-5, what="logits", context=what)
    for name, grad in grads.items():
        assert seen["grads"][name] is not None, f"{what}: parameter {name} got no gradient"
        assert_close(seen["grads"][name], grad, atol=1e-5, rtol=1e-4, what=f"gradient of {name}", context=what)
    runs = 1 if block_size == 0 else 2
    assert seen["layer_calls"] == [runs] * OVERRIDES["num_layers"], (
        f"{what}: each layer must run {runs} time(s) (" + ("no checkpointing" if block_size == 0 else
        "once in the forward, once recomputed in the backward") + f"); the layers ran {seen['layer_calls']} times")
    if block_size > 0:
        layers = OVERRIDES["num_layers"]
        groups = [list(range(start, min(start + block_size, layers))) for start in range(0, layers, block_size)]
        recomputed = [i for group in reversed(groups) for i in group]
        assert seen["order"][layers:] == recomputed, (
            f"{what}: the backward recomputed the layers in the order {seen['order'][layers:]}; with groups of "
            f"block_size={block_size} consecutive layers from the first ({groups}; the last may be shorter), each "
            f"group is recomputed as a whole, last group first: {recomputed}. block_size is the number of layers "
            f"in a group, not the number of groups")
        assert seen["saved_bytes"] < 0.5 * plain_bytes, (
            f"{what}: the forward saved {seen['saved_bytes']} bytes for the backward outside checkpoints, against "
            f"{plain_bytes} without checkpointing; checkpointed layers must save only their group's input")
    else:
        assert seen["saved_bytes"] == plain_bytes, (
            f"{what}: block_size 0 must checkpoint nothing; it saved {seen['saved_bytes']} bytes, a plain forward "
            f"{plain_bytes}")
