"""Spies on the provided Transformer LM and on torch, for tests that must see inside a benchmark.

Read by the tests of benchmarking_script, nsys_profile and torch_compile (visible and hidden).
They count what a submission's code made the model and the optimizer do without changing what
it computes:

* the ``lm_spy`` fixture (import it into a test module) patches ``TransformerLM.forward`` (the provided model's class, reached through
  ``adapters.get_transformer_lm``) to count forward passes, record input shapes, autocast state
  and logits dtype, and count backward passes through a gradient hook on the logits; a global
  optimizer hook counts ``optimizer.step()`` calls.
* ``spy_on_torch_compile`` wraps ``torch.compile``: it records each call and what the real one
  returned; ``compiled_once`` shares compiled objects between tests (compiling is slow).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

TINY_MODEL = {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2}
"""Overrides that shrink any model size to something a CPU runs in milliseconds."""


@dataclass
class LMSpy:
    forward_calls: int = 0
    backward_calls: int = 0
    optimizer_steps: int = 0
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    autocast_enabled: list[bool] = field(default_factory=list)
    autocast_dtypes: list[torch.dtype] = field(default_factory=list)
    logits_dtypes: list[torch.dtype] = field(default_factory=list)
    optimizer_types: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"forward": self.forward_calls, "backward": self.backward_calls, "optimizer.step": self.optimizer_steps}


@pytest.fixture
def lm_spy(adapters, monkeypatch) -> LMSpy:
    """Patch the provided TransformerLM class and hook every optimizer, for one test."""
    spy = LMSpy()
    lm_class = type(adapters.get_transformer_lm(model_overrides=TINY_MODEL))
    original_forward = lm_class.forward

    def counting_forward(self, token_ids, *args, **kwargs):
        spy.forward_calls += 1
        spy.input_shapes.append(tuple(token_ids.shape))
        device_type = token_ids.device.type
        spy.autocast_enabled.append(torch.is_autocast_enabled(device_type))
        spy.autocast_dtypes.append(torch.get_autocast_dtype(device_type))
        logits = original_forward(self, token_ids, *args, **kwargs)
        spy.logits_dtypes.append(logits.dtype)
        if logits.requires_grad:

            def count_backward(grad):
                spy.backward_calls += 1

            logits.register_hook(count_backward)
        return logits

    monkeypatch.setattr(lm_class, "forward", counting_forward)

    def count_step(optimizer, args, kwargs):
        spy.optimizer_steps += 1
        spy.optimizer_types.append(type(optimizer).__name__)

    handle = register_optimizer_step_post_hook(count_step)
    yield spy
    handle.remove()


@dataclass
class CompileSpy:
    calls: list[tuple[object, dict]] = field(default_factory=list)
    returned: list[object] = field(default_factory=list)


def spy_on_torch_compile(monkeypatch: pytest.MonkeyPatch, *, really_compile: bool = True) -> CompileSpy:
    """Replace ``torch.compile`` with a recorder that (by default) still compiles."""
    spy = CompileSpy()
    real_compile = torch.compile

    def recording_compile(fn=None, **kwargs):
        spy.calls.append((fn, kwargs))
        result = real_compile(fn, **kwargs) if really_compile else _Tagged(fn)
        spy.returned.append(result)
        return result

    monkeypatch.setattr(torch, "compile", recording_compile)
    return spy


class _Tagged:
    """A stand-in for a compiled function: calls the original and counts the calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


_compiled: dict[str, tuple[object, CompileSpy]] = {}


def compiled_once(key: str, build):
    """Run ``build()`` under a torch.compile spy once per test session; return (result, spy).

    Compiling on a CPU takes seconds per graph, so tests share what they compiled. Nothing is
    cached when ``build`` raises, so every test that needs it fails with that error.
    """
    if key not in _compiled:
        with pytest.MonkeyPatch.context() as patch:
            spy = spy_on_torch_compile(patch)
            result = build()
        _compiled[key] = (result, spy)
    return _compiled[key]
