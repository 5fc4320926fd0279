"""Probes for the torch_compile and pytorch_attention tests: watching ``torch.compile`` in the executor.

``watch_torch_compile`` replaces ``torch.compile`` where the submission looks it up, records each
call and what it returned, and puts the real one back afterwards. A call that names no backend,
mode or options compiles with ``by_device``: each graph it captures on CUDA tensors goes to the
default backend (inductor), as the handout asks, and each graph on CPU tensors to "aot_eager",
the same graph capture and autograd tracing without inductor's C++ build (35 s for one small
attention graph on a cold 2-core CPU, 45 s beside other compiles on a GPU runner, where it was
the grade's long pole). The probes return plain observations (counts, booleans, reprs) and the
objects the submission returned (as handles under --isolate); the tests make every verdict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class CompileSpy:
    """What ``torch.compile`` was called with (``calls``: (fn, kwargs)) and what it returned."""

    calls: list[tuple[object, dict]] = field(default_factory=list)
    returned: list[object] = field(default_factory=list)


class Tagged:
    """A stand-in for a compiled function: calls the original eagerly and counts the calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def by_device(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A torch.compile backend: inductor for a graph whose inputs include a CUDA tensor, else "aot_eager"."""
    from torch._dynamo import lookup_backend

    on_cuda = any(isinstance(value, torch.Tensor) and value.is_cuda for value in example_inputs)
    return lookup_backend("inductor" if on_cuda else "aot_eager")(graph, example_inputs)


@contextlib.contextmanager
def watch_torch_compile(*, really_compile: bool = True) -> Iterator[CompileSpy]:
    """Record ``torch.compile`` calls while the block runs; ``really_compile=False`` returns ``Tagged`` stand-ins."""
    spy = CompileSpy()
    real_compile = torch.compile

    def recording_compile(fn=None, **kwargs):
        spy.calls.append((fn, kwargs))
        options = dict(kwargs)
        if not {"backend", "mode", "options"} & options.keys():
            options["backend"] = by_device
        result = real_compile(fn, **options) if really_compile else Tagged(fn)
        spy.returned.append(result)
        return result

    torch.compile = recording_compile
    try:
        yield spy
    finally:
        torch.compile = real_compile


def _describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def compiled_attention(load_adapters: Callable[[], Any]) -> dict:
    """Run ``get_compiled_attention`` under a watch (really compiling).

    Returns {"compiled": what it returned, "calls": torch.compile calls, "returned_it": it is what
    torch.compile returned, "compiled_sdpa": torch.compile's first argument is the model's
    scaled_dot_product_attention, "compiled_what": its name}.

    The tests ask for the compiled function's gradients across the process boundary, which
    keeps the graph (``retain_graph=True``); compiled backwards that donate buffers refuse that.
    Donating is a memory saving only, so it is turned off in this process before compiling.
    """
    import torch._functorch.config

    torch._functorch.config.donated_buffer = False
    adapters = load_adapters()
    with watch_torch_compile() as spy:
        compiled = adapters.get_compiled_attention()
    first = spy.calls[0][0] if spy.calls else None
    return {"compiled": compiled, "calls": len(spy.calls), "returned_it": bool(spy.returned) and compiled is spy.returned[0],
            "compiled_sdpa": bool(spy.calls) and first is adapters.get_scaled_dot_product_attention(),
            "compiled_what": _describe(first) if spy.calls else None}


def compile_model(load_adapters: Callable[[], Any], model_overrides: dict, tokens: torch.Tensor | None = None) -> dict:
    """Build the provided model with ``model_overrides``; run ``run_compile_model`` on it under a watch
    whose torch.compile returns an eager stand-in.

    Returns {"calls", "compiled_the_model": torch.compile got exactly the model, "compiled_what":
    reprs of what it got, "returned_it": the result is what torch.compile returned}; with
    ``tokens``, also "before"/"after": the result's logits for them, before and after every
    parameter of the eager model is halved (no grad).
    """
    adapters = load_adapters()
    model = adapters.get_transformer_lm(model_overrides=model_overrides)
    with watch_torch_compile(really_compile=False) as spy:
        compiled = adapters.run_compile_model(model)
        observed = {"calls": len(spy.calls), "compiled_the_model": len(spy.calls) == 1 and spy.calls[0][0] is model,
                    "compiled_what": [_describe(call[0]) for call in spy.calls],
                    "returned_it": bool(spy.returned) and compiled is spy.returned[0]}
        if tokens is not None:
            with torch.no_grad():
                observed["before"] = compiled(tokens)
                for parameter in model.parameters():
                    parameter.mul_(0.5)
                observed["after"] = compiled(tokens)
    return observed


def compiled_vs_eager(load_adapters: Callable[[], Any], model_overrides: dict, tokens: torch.Tensor,
                      device: str, seed: int) -> dict:
    """Seed, build the model on ``device``, really compile it with ``run_compile_model``, run it on ``tokens``.

    Returns {"logits", "names": parameter names, "grads": gradients of
    ``logits.float().square().mean()`` for each parameter, "state": the model's parameters,
    "calls", "compiled_the_model", "returned_it" (as ``compile_model`` reports them)}. The eager
    truth is computed by the test, in the harness, from "state" (never here).
    """
    adapters = load_adapters()
    torch.manual_seed(seed)
    model = adapters.get_transformer_lm(model_overrides=model_overrides, device=device)
    state = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with watch_torch_compile() as spy:
        compiled = adapters.run_compile_model(model)
    watched = {"calls": len(spy.calls), "compiled_the_model": len(spy.calls) == 1 and spy.calls[0][0] is model,
               "returned_it": bool(spy.returned) and compiled is spy.returned[0]}
    logits = compiled(tokens.to(device))
    names, parameters = zip(*model.named_parameters())
    grads = torch.autograd.grad(logits.float().square().mean(), parameters)
    return {"logits": logits.detach(), "names": list(names), "grads": [g.detach() for g in grads], "state": state,
            **watched}


compiled_vs_eager.reply_bytes = 512 << 20  # logits, gradients and parameters of a 2-layer small model: 294 MB

PROBES = {"compiled_attention": compiled_attention, "compile_model": compile_model,
          "compiled_vs_eager": compiled_vs_eager}
