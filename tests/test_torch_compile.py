"""Visible tests of §2.2 torch_compile: compiled attention and a compiled model equal eager.

Compiling on a CPU generates and builds C++ (seconds per graph), so shapes are tiny and each
compiled object is built once per test session and shared (see ``compiled_once``). What
``torch.compile`` was given and returned is watched next to the submission by the probes of
executor/probes/torch_compile.py; the verdicts are here.
"""

from __future__ import annotations

import pytest
import torch

from harness.assertions import assert_close
from tests.checks.attention_truth import eager_model_truth, model_attention, require_compiled
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL, compiled_once

def compiled_attention(adapters) -> dict:
    return compiled_once(adapters, "torch_compile.compiled_attention")


def test_compiled_attention_is_what_torch_compile_returned(adapters):
    seen = compiled_attention(adapters)
    assert seen["calls"] == 1, f"compiled_attention must call torch.compile once; it called it {seen['calls']} times"
    assert seen["returned_it"], "return the object torch.compile returned, not a wrapper around it"
    assert seen["compiled_sdpa"], (
        "compile the model's scaled_dot_product_attention (cs336_systems.model); "
        f"torch.compile got {seen['compiled_what']}"
    )


def test_compiled_attention_matches_eager(adapters):
    seen = compiled_attention(adapters)
    require_compiled(seen)
    compiled = seen["compiled"]
    generator = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 16, 8, generator=generator, requires_grad=True) for _ in range(3))
    context = "compiled attention on Q, K, V of shape (2, 16, 8), float32, no mask"
    out = compiled(Q, K, V)
    expected = model_attention(Q, K, V)  # computed here, never by the submission
    assert_close(out, expected, atol=1e-5, rtol=1e-5, what="output", context=context)
    grads = torch.autograd.grad(out.sum(), (Q, K, V))
    expected_grads = torch.autograd.grad(expected.sum(), (Q, K, V))
    for name, grad, expected_grad in zip("QKV", grads, expected_grads):
        assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5, what=f"d{name}", context=context)


def test_compile_model_returns_torch_compile_of_the_model(adapters):
    # Compiling a whole model on a CPU takes tens of seconds: here torch.compile is only watched
    # (it returns a stand-in that runs the model eagerly); the GPU test below really compiles.
    seen = run_probe(adapters, "torch_compile.compile_model", TINY_MODEL)
    assert seen["calls"] == 1 and seen["compiled_the_model"], (
        f"compile_model must call torch.compile(model) once; torch.compile got {seen['compiled_what']}"
    )
    assert seen["returned_it"], "compile_model must return what torch.compile returned"


@pytest.mark.gpu
def test_compiled_model_matches_eager_on_gpu(adapters):
    tokens = torch.randint(0, 10_000, (4, 128), generator=torch.Generator().manual_seed(1))
    seen = run_probe(adapters, "torch_compile.compiled_vs_eager", {"num_layers": 2}, tokens, "cuda", 0)
    context = "compiled vs eager TransformerLM 'small' with 2 layers, tokens of shape (4, 128), float32"
    assert seen["calls"] == 1 and seen["compiled_the_model"] and seen["returned_it"], (
        "compile_model must return torch.compile(model) (handout §2.2); an eager model earns no torch_compile points")
    expected, expected_grads = eager_model_truth({"num_layers": 2}, seen["state"], tokens.cuda())
    assert_close(seen["logits"], expected, atol=1e-3, rtol=1e-3, what="logits", context=context)
    for name, grad in zip(seen["names"], seen["grads"], strict=True):
        assert_close(grad, expected_grads[name], atol=1e-4, rtol=1e-2, what=f"gradient of {name}", context=context)
