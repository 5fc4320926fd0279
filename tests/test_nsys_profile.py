"""Visible tests of §1.2 nsys_profile: the annotated attention and the phase-annotated training loop.

NVTX calls are recorded next to the submission (see tests/checks/nvtx_recorder.py), so these run on a
CPU. The aten ops that run inside each range are logged too, to check that each stage happens
in its own range. Training is compared with a plain AdamW loop run here, whose forward and
backward passes go through the provided model with the loop's own parameters.
"""

from __future__ import annotations

import pytest
import torch

from harness.assertions import assert_close
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL
from tests.checks.nvtx_recorder import MATMUL_OPS, SOFTMAX_OPS, nvtx, ops_by_range  # noqa: F401 (nvtx fixture)

ATTENTION_RANGES = ["computing attention scores", "computing softmax", "final matmul"]


def attention_inputs(seed=0, batch=(2,), queries=5, keys=7, d_k=8, d_v=6):
    generator = torch.Generator().manual_seed(seed)
    Q = torch.randn(*batch, queries, d_k, generator=generator, requires_grad=True)
    K = torch.randn(*batch, keys, d_k, generator=generator, requires_grad=True)
    V = torch.randn(*batch, keys, d_v, generator=generator, requires_grad=True)
    mask = torch.rand(queries, keys, generator=generator) > 0.5
    mask[:, 0] = True  # every query sees at least one key
    return Q, K, V, mask


def test_annotated_attention_pushes_the_three_ranges_in_order(adapters, nvtx):
    annotated = adapters.get_annotated_scaled_dot_product_attention()
    Q, K, V, mask = attention_inputs()
    nvtx.call(annotated, Q, K, V, mask)
    expected = [(kind, name) for name in ATTENTION_RANGES for kind in ("push", "pop")]
    assert nvtx.ranges() == expected, (
        f"expected the ranges {ATTENTION_RANGES}, each pushed and popped in turn (not nested); "
        f"recorded {nvtx.ranges()}"
    )


def test_annotated_attention_does_each_stage_in_its_range(adapters, nvtx):
    annotated = adapters.get_annotated_scaled_dot_product_attention()
    Q, K, V, mask = attention_inputs()
    nvtx.call(annotated, Q, K, V, mask, log_ops=True)
    ops = ops_by_range(nvtx.events)
    where = {name: sorted(set(ops.get(name, []))) for name in ["", *ATTENTION_RANGES]}
    assert MATMUL_OPS & set(ops.get("computing attention scores", [])), (
        f"the Q K^T matmul must run inside 'computing attention scores'; ops per range: {where}"
    )
    assert SOFTMAX_OPS & set(ops.get("computing softmax", [])), (
        f"the softmax (or its exp) must run inside 'computing softmax'; ops per range: {where}"
    )
    assert MATMUL_OPS & set(ops.get("final matmul", [])), (
        f"the product with V must run inside 'final matmul'; ops per range: {where}"
    )
    outside = set(ops.get("", [])) & (MATMUL_OPS | SOFTMAX_OPS)
    assert not outside, f"{sorted(outside)} ran outside every range; ops per range: {where}"


@pytest.mark.parametrize("use_mask", [True, False])
def test_annotated_attention_equals_model_attention(adapters, nvtx, use_mask):
    annotated = adapters.get_annotated_scaled_dot_product_attention()
    plain = adapters.get_scaled_dot_product_attention()
    Q, K, V, mask = attention_inputs(seed=1)
    mask = mask if use_mask else None
    context = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}, mask={'random' if use_mask else None}"
    out = nvtx.call(annotated, Q, K, V, mask)
    grads = torch.autograd.grad(out.sum(), (Q, K, V))
    expected = plain(Q, K, V, mask)
    expected_grads = torch.autograd.grad(expected.sum(), (Q, K, V))
    assert_close(out, expected, atol=1e-5, rtol=1e-5, what="annotated attention output", context=context)
    for name, grad, expected_grad in zip("QKV", grads, expected_grads):
        assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5, what=f"d{name}", context=context)


# ----------------------------------------------------------------------------- profiled_training


def training_setup(adapters, seed=0):
    """A tiny provided model (in the submission's process) and token ids for it."""
    torch.manual_seed(seed)
    model = adapters.get_transformer_lm(model_overrides=TINY_MODEL)
    inputs = torch.randint(0, 10_000, (2, 8))
    targets = torch.randint(0, 10_000, (2, 8))
    return model, inputs, targets


def expected_training_events(warmup_steps, measure_steps):
    step = [("model", "forward"), ("model", "backward"), ("model", "optimizer.step")]
    events = [("push", "warm-up"), *step * warmup_steps, ("sync", ""), ("pop", "warm-up")]
    for _ in range(measure_steps):
        for phase, work in zip(("forward", "backward", "optimizer"), step):
            events += [("push", phase), work, ("pop", phase)]
        events.append(("sync", ""))
    return events


def test_profiled_training_phases_in_order(adapters, nvtx):
    model, inputs, targets = training_setup(adapters)
    nvtx.profiled_training(model, "AdamW", 1e-2, inputs, targets, warmup_steps=2, measure_steps=2)
    expected = expected_training_events(2, 2)
    assert nvtx.events == expected, (
        "expected one 'warm-up' range around the 2 warm-up steps (ending with a sync inside it), then for "
        "each of the 2 measured steps the ranges 'forward', 'backward', 'optimizer' around their work and a "
        "sync after them.\nexpected: " + "\n          ".join(map(str, expected))
        + "\nrecorded: " + "\n          ".join(map(str, nvtx.events))
    )
    assert not nvtx.open_ranges, f"every pushed range must be popped; still open: {nvtx.open_ranges}"


def plain_training(adapters, model, parameters, inputs, targets, steps, lr):
    """``steps`` AdamW steps on cross-entropy from ``parameters`` ({name: tensor}), run here: only the
    model's forward (with these parameters) and its backward run in the submission's process."""
    parameters = {name: p.detach().clone().requires_grad_(True) for name, p in parameters.items()}
    optimizer = torch.optim.AdamW(parameters.values(), lr=lr)
    for _ in range(steps):
        logits = run_probe(adapters, "nsys_profile.forward_with", model, parameters, inputs)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return parameters


def test_profiled_training_trains_like_a_plain_loop(adapters, nvtx):
    model, inputs, targets = training_setup(adapters, seed=3)
    trained = nvtx.profiled_training(model, "AdamW", 1e-2, inputs, targets, warmup_steps=1, measure_steps=2)
    twin = plain_training(adapters, model, trained["before"], inputs, targets, steps=3, lr=1e-2)
    for name, parameter in trained["after"].items():
        assert_close(
            parameter,
            twin[name],
            atol=1e-6,
            rtol=1e-5,
            what=f"parameter {name}",
            context="after 1 warm-up + 2 measured steps, compared with a plain AdamW loop on cross-entropy",
        )
    leftover = [name for name, grad in trained["grads"].items() if grad is not None and grad.abs().sum() > 0]
    assert not leftover, f"gradients must be zeroed after each optimizer step; still set: {leftover}"
