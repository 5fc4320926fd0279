"""Hidden tests of §1.2 nsys_profile: other shapes and masks, the ranges inside the model and
inside the training phases, no warm-up, and bad step counts.

NVTX is recorded next to the submission through the ``nvtx`` fixture (tests/checks/nvtx_recorder.py);
only tensors and plain settings are sent there."""

from __future__ import annotations

import pytest
import torch

from harness.assertions import assert_close
from tests.checks.model_spies import TINY_MODEL
from tests.checks.nvtx_recorder import nvtx  # noqa: F401 (fixture)

ATTENTION_RANGES = ["computing attention scores", "computing softmax", "final matmul"]
PHASES = ["warm-up", "forward", "backward", "optimizer"]


@pytest.mark.parametrize(
    ("batch", "queries", "keys", "d_k", "d_v", "mask_shape"),
    [((), 4, 4, 16, 16, None), ((2, 3), 6, 9, 8, 4, (6, 9)), ((2, 3), 5, 5, 8, 8, (2, 3, 5, 5)), ((1,), 1, 3, 4, 2, (1, 3))],
    ids=["unbatched-no-mask", "heads-broadcast-mask", "full-mask", "one-query"],
)
def test_equals_model_attention_on_other_shapes(adapters, nvtx, batch, queries, keys, d_k, d_v, mask_shape):
    generator = torch.Generator().manual_seed(7)
    Q = torch.randn(*batch, queries, d_k, generator=generator, dtype=torch.float64, requires_grad=True)
    K = torch.randn(*batch, keys, d_k, generator=generator, dtype=torch.float64, requires_grad=True)
    V = torch.randn(*batch, keys, d_v, generator=generator, dtype=torch.float64, requires_grad=True)
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape, generator=generator) > 0.4
        mask[..., 0] = True
    context = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}, mask {mask_shape}, float64"
    out = nvtx.call(adapters.get_annotated_scaled_dot_product_attention(), Q, K, V, mask)
    expected = adapters.get_scaled_dot_product_attention()(Q, K, V, mask)
    assert_close(out, expected, atol=1e-10, rtol=1e-10, what="output", context=context)
    dO = torch.randn_like(expected)
    grads = torch.autograd.grad(out, (Q, K, V), dO)
    expected_grads = torch.autograd.grad(expected, (Q, K, V), dO)
    for name, grad, expected_grad in zip("QKV", grads, expected_grads):
        assert_close(grad, expected_grad, atol=1e-10, rtol=1e-10, what=f"d{name}", context=context)
    assert [name for kind, name in nvtx.ranges() if kind == "push"] == ATTENTION_RANGES


def test_swapped_into_the_model_every_layer_is_annotated(adapters, nvtx):
    torch.manual_seed(0)
    model = adapters.get_transformer_lm(model_overrides={**TINY_MODEL, "num_layers": 3})
    tokens = torch.randint(0, 10_000, (2, 6))
    with torch.no_grad():
        expected = model(tokens)
        logits = nvtx.with_annotated_attention(model, tokens)
    assert_close(logits, expected, atol=1e-5, rtol=1e-5, what="logits", context="model with the annotated attention")
    pushes = [name for kind, name in nvtx.ranges() if kind == "push"]
    assert pushes == ATTENTION_RANGES * 3, f"3 layers must push the 3 attention ranges each, in order; got {pushes}"


def nesting(events):
    """(parent, child) pairs for every pushed range."""
    stack, pairs = [], []
    for kind, name in events:
        if kind == "push":
            pairs.append((stack[-1] if stack else None, name))
            stack.append(name)
        elif kind == "pop":
            stack.pop()
    return pairs


def test_attention_ranges_nest_inside_the_phase_ranges(adapters, nvtx):
    torch.manual_seed(0)
    annotated = adapters.get_annotated_scaled_dot_product_attention()
    model = adapters.get_transformer_lm(model_overrides=TINY_MODEL, attention_fn=annotated)
    tokens = torch.randint(0, 10_000, (2, 6))
    nvtx.profiled_training(model, "SGD", 0.1, tokens, tokens, warmup_steps=1, measure_steps=2)
    pairs = nesting(nvtx.events)
    phases = [child for parent, child in pairs if child in PHASES]
    assert phases == ["warm-up", "forward", "backward", "optimizer", "forward", "backward", "optimizer"], phases
    parents = {parent for parent, child in pairs if child in ATTENTION_RANGES}
    assert parents == {"warm-up", "forward"}, (
        f"attention runs in the forward pass, so its ranges sit inside 'warm-up' and 'forward' only; parents {parents}"
    )
    assert all(parent is None for parent, child in pairs if child in PHASES), (
        f"phase ranges are top-level, never nested in each other; got {[p for p in pairs if p[1] in PHASES]}"
    )
    assert sum(child == "computing softmax" for _, child in pairs) == 3, "one attention call per forward pass (1 layer)"


def test_no_warmup_steps(adapters, nvtx):
    torch.manual_seed(1)
    model = adapters.get_transformer_lm(model_overrides=TINY_MODEL)
    tokens = torch.randint(0, 10_000, (1, 4))
    nvtx.profiled_training(model, "SGD", 0.1, tokens, tokens, warmup_steps=0, measure_steps=3)
    pushes = [name for kind, name in nvtx.ranges() if kind == "push"]
    assert pushes == ["warm-up"] + ["forward", "backward", "optimizer"] * 3, pushes
    syncs = nvtx.events.count(("sync", ""))
    assert syncs == 4, f"synchronize runs 1 + measure_steps = 4 times; got {syncs}"


@pytest.mark.parametrize(("warmup_steps", "measure_steps"), [(-1, 2), (1, 0)])
def test_bad_step_counts_are_refused_before_any_step(adapters, nvtx, warmup_steps, measure_steps):
    torch.manual_seed(2)
    model = adapters.get_transformer_lm(model_overrides=TINY_MODEL)
    tokens = torch.randint(0, 10_000, (1, 4))
    with pytest.raises(ValueError):
        nvtx.profiled_training(model, "SGD", 0.1, tokens, tokens, warmup_steps=warmup_steps, measure_steps=measure_steps)
    before, after = nvtx.training["before"], nvtx.training["after"]
    assert all(torch.equal(before[name], after[name]) for name in before), "no step may run before the check"
    assert not nvtx.ranges(), f"no range may be pushed before the check; got {nvtx.ranges()}"
