"""Hidden tests of §2.2 torch_compile: compiled attention on other data, another shape, with a
mask, and in float64; the compiled model shares the eager model's parameters."""

from __future__ import annotations

import pytest
import torch

from harness.assertions import assert_close
from tests.checks.attention_truth import model_attention, require_compiled
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL, compiled_once


def compiled_attention(adapters):
    seen = compiled_once(adapters, "torch_compile.compiled_attention")
    require_compiled(seen)
    return seen["compiled"]


def compare(adapters, Q, K, V, mask, atol, context):
    compiled = compiled_attention(adapters)
    out = compiled(Q, K, V, mask)
    expected = model_attention(Q, K, V, mask)  # computed here, never by the submission
    assert_close(out, expected, atol=atol, rtol=atol, what="output", context=context)
    dO = torch.randn_like(expected)
    grads = torch.autograd.grad(out, (Q, K, V), dO)
    expected_grads = torch.autograd.grad(expected, (Q, K, V), dO)
    for name, grad, expected_grad in zip("QKV", grads, expected_grads):
        assert_close(grad, expected_grad, atol=atol, rtol=atol, what=f"d{name}", context=context)


def test_same_shape_other_values(adapters):
    generator = torch.Generator().manual_seed(11)
    Q, K, V = (3 * torch.randn(2, 16, 8, generator=generator, requires_grad=True) for _ in range(3))
    Q, K, V = (t.detach().requires_grad_() for t in (Q, K, V))
    compare(adapters, Q, K, V, None, 1e-5, "(2, 16, 8) float32, larger values, no mask")


def test_causal_mask_with_heads(adapters):
    generator = torch.Generator().manual_seed(12)
    Q, K, V = (torch.randn(2, 2, 8, 4, generator=generator, requires_grad=True) for _ in range(3))
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    compare(adapters, Q, K, V, mask, 1e-5, "(batch 2, heads 2, seq 8, d 4) float32 with a causal mask")


def test_compiled_model_shares_parameters(adapters):
    # The probe halves the eager model's parameters between two runs of the compiled one.
    seen = run_probe(adapters, "torch_compile.compile_model", TINY_MODEL, torch.randint(0, 10_000, (1, 4)))
    assert seen["calls"] == 1 and seen["compiled_the_model"] and seen["returned_it"], (
        "compile_model must return torch.compile(model) (handout §2.2): sharing parameters earns nothing uncompiled")
    before, after = seen["before"], seen["after"]
    assert not torch.allclose(before, after), "the compiled model must use the eager model's parameters, not a copy"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_compiled_attention_matches_eager(adapters, dtype):
    generator = torch.Generator("cuda").manual_seed(13)
    Q, K, V = (
        torch.randn(4, 8, 256, 64, generator=generator, device="cuda", dtype=dtype, requires_grad=True)
        for _ in range(3)
    )
    mask = torch.ones(256, 256, dtype=torch.bool, device="cuda").tril()
    atol = 1e-4 if dtype == torch.float32 else 5e-2
    compare(adapters, Q, K, V, mask, atol, f"(4, 8, 256, 64) {dtype} on CUDA with a causal mask")
