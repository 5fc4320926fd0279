"""Fake attention implementations and a fake ``bench`` for testing the §2.6 sweep on a CPU.

Read by tests/test_flash_benchmarking.py and the hidden tests. Each fake implementation counts
its forward and backward calls in one shared Counter (and can raise
``torch.cuda.OutOfMemoryError`` from some sequence length on); ``FakeBench`` runs the function
it is given once and returns a unique number, remembering which calls that run made. A row's
number then tells which work it timed.
"""

from __future__ import annotations

from collections import Counter

import torch


PHASES = ("forward", "backward", "forward_backward")


class CountingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Q, K, V, is_causal, counter):
        ctx.counter = counter
        counter.log.append((counter.name, tuple(Q.shape), Q.dtype, is_causal, Q.requires_grad))
        counter.calls[counter.name, "forward"] += 1
        if counter.oom_from is not None and Q.shape[-2] >= counter.oom_from:
            raise torch.cuda.OutOfMemoryError(f"fake out of memory in {counter.name}")
        return Q * 2 + K + V

    @staticmethod
    def backward(ctx, dO):
        ctx.counter.calls[ctx.counter.name, "backward"] += 1
        return 2 * dO, dO, dO, None, None


class FakeImplementation:
    """One fake implementation: counts its calls in a Counter shared by all of them."""

    def __init__(self, name, calls, log, oom_from=None):
        self.name, self.calls, self.log, self.oom_from = name, calls, log, oom_from

    def __call__(self, Q, K, V, is_causal):
        return CountingAttention.apply(Q, K, V, is_causal, self)


class FakeBench:
    """Runs fn once; returns 1000 + the call number; remembers which work each call ran."""

    def __init__(self, calls: Counter):
        self.calls = calls
        self.ran: dict[float, Counter] = {}

    def __call__(self, fn) -> float:
        before = Counter(self.calls)
        fn()
        value = 1000.0 + len(self.ran)
        self.ran[value] = Counter({key: n - before[key] for key, n in self.calls.items() if n - before[key]})
        return value


def fake_setup(oom_from=None):
    calls, log = Counter(), []
    implementations = {
        "triton": FakeImplementation("triton", calls, log, oom_from=oom_from),
        "pytorch": FakeImplementation("pytorch", calls, log),
    }
    return implementations, FakeBench(calls), log
