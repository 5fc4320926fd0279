"""Probes for the §2.6 flash_benchmarking tests: the sweep run on fake implementations and a fake bench.

Each fake implementation counts its forward and backward calls in one shared Counter (and can
raise ``torch.cuda.OutOfMemoryError`` from some sequence length on); ``FakeBench`` runs the
function it is given once and returns a unique number, remembering which calls that run made.
A row's number then tells which work it timed. They run next to the submission, so their
autograd nodes and out-of-memory errors are real ones there; the records come back as plain data.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch


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


@contextlib.contextmanager
def _randn_runs_out_of_memory_at(size: int | None):
    """While the block runs, ``torch.randn`` raises OutOfMemoryError for any shape holding ``size``."""
    real_randn = torch.randn

    def randn(*args, **kwargs):
        sizes = args[0] if args and isinstance(args[0], (tuple, list, torch.Size)) else args
        if size in tuple(sizes):
            raise torch.cuda.OutOfMemoryError("fake out of memory while drawing inputs")
        return real_randn(*args, **kwargs)

    if size is not None:
        torch.randn = randn
    try:
        yield
    finally:
        torch.randn = real_randn


def sweep(load_adapters: Callable[[], Any], sweep_kwargs: dict, names: list[str], oom_from: int | None = None,
          fake_bench: bool = True, oom_randn_size: int | None = None) -> dict:
    """``run_flash_benchmark_sweep(**sweep_kwargs)`` with fake implementations ``names`` (the first runs
    out of memory from ``oom_from`` on), the fake bench unless ``fake_bench`` is False, and
    ``torch.randn`` out of memory for shapes holding ``oom_randn_size``.

    Returns {"rows", "ran": [[bench value, [[name, phase, count], ...]], ...] (empty without the
    fake bench), "log": [[name, shape, dtype, is_causal, requires_grad], ...] per forward}.
    """
    calls, log = Counter(), []
    implementations = {name: FakeImplementation(name, calls, log, oom_from=oom_from if i == 0 else None)
                       for i, name in enumerate(names)}
    bench = FakeBench(calls) if fake_bench else None
    kwargs = dict(sweep_kwargs, implementations=implementations)
    if bench is not None:
        kwargs["bench"] = bench
    with _randn_runs_out_of_memory_at(oom_randn_size):
        rows = load_adapters().run_flash_benchmark_sweep(**kwargs)
    ran = [] if bench is None else [[value, [[name, phase, n] for (name, phase), n in counter.items()]]
                                    for value, counter in bench.ran.items()]
    return {"rows": rows, "ran": ran, "log": [list(entry) for entry in log]}


def watched_do_bench(load_adapters: Callable[[], Any], sweep_kwargs: dict) -> dict:
    """``run_flash_benchmark_sweep(**sweep_kwargs)`` with ``triton.testing.do_bench`` watched.

    Returns {"rows", "returned": what each do_bench call returned, in order}.
    """
    import triton.testing

    real_do_bench = triton.testing.do_bench
    returned = []

    def do_bench(fn, *args, **kwargs):
        returned.append(real_do_bench(fn, *args, **kwargs))
        return returned[-1]

    triton.testing.do_bench = do_bench
    try:
        rows = load_adapters().run_flash_benchmark_sweep(**sweep_kwargs)
    finally:
        triton.testing.do_bench = real_do_bench
    return {"rows": rows, "returned": returned}


PROBES = {"sweep": sweep, "watched_do_bench": watched_do_bench}
