"""Visible tests of §2.2 torch_compile: compiled attention and a compiled model equal eager.

Compiling on a CPU generates and builds C++ (seconds per graph), so shapes are tiny and each
compiled object is built once per test session and shared (see ``compiled_once``).
"""

from __future__ import annotations

import pytest
import torch

from tests.assertions import assert_close
from tests.model_spies import TINY_MODEL, compiled_once, spy_on_torch_compile

def compiled_attention(adapters):
    return compiled_once("attention", adapters.get_compiled_attention)


def test_compiled_attention_is_what_torch_compile_returned(adapters):
    compiled, spy = compiled_attention(adapters)
    assert len(spy.calls) == 1, f"compiled_attention must call torch.compile once; it called it {len(spy.calls)} times"
    assert compiled is spy.returned[0], "return the object torch.compile returned, not a wrapper around it"
    assert spy.calls[0][0] is adapters.get_scaled_dot_product_attention(), (
        "compile the model's scaled_dot_product_attention (cs336_systems.model)"
    )


def test_compiled_attention_matches_eager(adapters):
    compiled, _ = compiled_attention(adapters)
    eager = adapters.get_scaled_dot_product_attention()
    generator = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 16, 8, generator=generator, requires_grad=True) for _ in range(3))
    context = "compiled attention on Q, K, V of shape (2, 16, 8), float32, no mask"
    out = compiled(Q, K, V)
    expected = eager(Q, K, V)
    assert_close(out, expected, atol=1e-5, rtol=1e-5, what="output", context=context)
    grads = torch.autograd.grad(out.sum(), (Q, K, V))
    expected_grads = torch.autograd.grad(expected.sum(), (Q, K, V))
    for name, grad, expected_grad in zip("QKV", grads, expected_grads):
        assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5, what=f"d{name}", context=context)


def test_compile_model_returns_torch_compile_of_the_model(adapters, monkeypatch):
    # Compiling a whole model on a CPU takes tens of seconds: here torch.compile is only watched
    # (it returns a stand-in that runs the model eagerly); the GPU test below really compiles.
    spy = spy_on_torch_compile(monkeypatch, really_compile=False)
    model = adapters.get_transformer_lm(model_overrides=TINY_MODEL)
    compiled = adapters.run_compile_model(model)
    assert len(spy.calls) == 1 and spy.calls[0][0] is model, (
        f"compile_model must call torch.compile(model) once; torch.compile got {[call[0] for call in spy.calls]}"
    )
    assert compiled is spy.returned[0], "compile_model must return what torch.compile returned"


@pytest.mark.gpu
def test_compiled_model_matches_eager_on_gpu(adapters):
    torch.manual_seed(0)
    model = adapters.get_transformer_lm(model_overrides={"num_layers": 2}, device="cuda")
    compiled = adapters.run_compile_model(model)
    tokens = torch.randint(0, 10_000, (4, 128), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    context = "compiled vs eager TransformerLM 'small' with 2 layers, tokens of shape (4, 128), float32"
    logits = compiled(tokens)
    expected = model(tokens)
    assert_close(logits, expected, atol=1e-3, rtol=1e-3, what="logits", context=context)
    grads = torch.autograd.grad(logits.float().square().mean(), list(model.parameters()))
    expected_grads = torch.autograd.grad(expected.float().square().mean(), list(model.parameters()))
    for (name, _), grad, expected_grad in zip(model.named_parameters(), grads, expected_grads):
        assert_close(grad, expected_grad, atol=1e-4, rtol=1e-2, what=f"gradient of {name}", context=context)
