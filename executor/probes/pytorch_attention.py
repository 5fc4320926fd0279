"""Probes for the §2.1 pytorch_attention tests: the attention sweep run on a fake attention.

``Behaviour(...).attention`` is an attention function ``fn(Q, K, V) -> Q + K + V`` whose forward
and backward sleep as configured (longer on the first call per shape, like a kernel being
loaded), can raise ``torch.cuda.OutOfMemoryError`` from some sequence length on, and records
its inputs. It runs next to the submission so that its autograd node and its out-of-memory
errors are real ones there; ``sweep`` returns the rows and the fake's records to the tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from .torch_compile import Tagged, watch_torch_compile


class FakeAttention(torch.autograd.Function):
    """O = Q + K + V, with a forward and a backward that sleep as ``behaviour`` says."""

    @staticmethod
    def forward(ctx, Q, K, V, behaviour):
        ctx.behaviour = behaviour
        behaviour.on_forward(Q, K, V)
        return Q + K + V

    @staticmethod
    def backward(ctx, grad):
        ctx.behaviour.on_backward(grad)
        return grad, grad, grad, None


class Behaviour:
    """Records calls; sleeps ``forward_s`` / ``backward_s``, or ``first_call_s`` on a shape's first call."""

    def __init__(self, forward_s=0.0, backward_s=0.0, first_call_s=0.0, oom_forward_from=None, oom_backward_from=None):
        self.forward_s, self.backward_s, self.first_call_s = forward_s, backward_s, first_call_s
        self.oom_forward_from, self.oom_backward_from = oom_forward_from, oom_backward_from
        self.inputs: list[tuple] = []
        self.seen_forward: set = set()
        self.seen_backward: set = set()

    def on_forward(self, Q, K, V):
        self.inputs.append(tuple((tuple(t.shape), t.dtype, t.requires_grad) for t in (Q, K, V)))
        if self.oom_forward_from is not None and Q.shape[-2] >= self.oom_forward_from:
            raise torch.cuda.OutOfMemoryError("fake out of memory in forward")
        first = Q.shape not in self.seen_forward
        self.seen_forward.add(Q.shape)
        time.sleep(self.first_call_s if first else self.forward_s)

    def on_backward(self, grad):
        if self.oom_backward_from is not None and grad.shape[-2] >= self.oom_backward_from:
            raise torch.cuda.OutOfMemoryError("fake out of memory in backward")
        first = grad.shape not in self.seen_backward
        self.seen_backward.add(grad.shape)
        time.sleep(self.first_call_s if first else self.backward_s)

    def attention(self, Q, K, V):
        return FakeAttention.apply(Q, K, V, self)


def sweep(load_adapters: Callable[[], Any], behaviour: dict | None, sweep_kwargs: dict) -> dict:
    """``run_attention_sweep(**sweep_kwargs)`` with ``attention_fn`` a fake made from ``behaviour``
    (keyword arguments of ``Behaviour``; None: the submission's default attention), while
    ``torch.compile`` is watched and returns an eager stand-in.

    Returns {"rows", "inputs": the fake's (shape, dtype, requires_grad) triples per forward,
    "compile_calls": torch.compile calls, "compiled_the_attention": the first compiled the fake,
    "compiled_calls": calls through the first stand-in torch.compile returned}.
    """
    fake = None if behaviour is None else Behaviour(**behaviour)
    kwargs = dict(sweep_kwargs)
    if fake is not None:
        kwargs["attention_fn"] = fake.attention
    with watch_torch_compile(really_compile=False) as spy:
        rows = load_adapters().run_attention_sweep(**kwargs)
    first = spy.returned[0] if spy.returned else None
    return {"rows": rows, "inputs": [] if fake is None else fake.inputs, "compile_calls": len(spy.calls),
            "compiled_the_attention": bool(spy.calls) and fake is not None and spy.calls[0][0] == fake.attention,
            "compiled_calls": first.calls if isinstance(first, Tagged) else 0}


PROBES = {"sweep": sweep}
