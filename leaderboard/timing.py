"""The official timing loop, and the matmul rate that sets the physical floor.

Staff and students read this file to know exactly what the leaderboard time is. It is CS336's
timing code, followed literally:

    q, k, v = torch.randn(3, 16, 16384, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    flash = torch.compile(FlashAttention.apply)

    def flash_forward_backward():
        o = flash(q, k, v, True)
        loss = o.sum()
        loss.backward()

    results = triton.testing.do_bench(flash_forward_backward, rep=10000, warmup=1000)

``q, k, v`` unpack one (3, ...) leaf, so they are views and their gradients accumulate into
that leaf's ``.grad`` on every call, as in the original. The one change: ``do_bench`` returns
every call's time (``return_mode="all"``) and the leaderboard reports the median and the
interquartile spread, where the original printed the mean. A second timing replaces
``o.sum().backward()`` with ``o.backward(dO)`` for a random ``dO``.

Without CUDA (``--cpu``) the same steps are timed with the host clock, ``plain_calls``
calls after ``plain_warmup_calls``; those numbers only show that the pipeline runs.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch

from leaderboard.config import MATMUL_SIZE_CPU, MATMUL_SIZE_GPU, Problem, TimingSettings, matmul_flops
from leaderboard.timer_guard import CapturedClock


@dataclass
class Timing:
    """Per-call times of one timing run, in milliseconds."""

    times_ms: list[float]

    @property
    def median_ms(self) -> float:
        return _quantile(self.times_ms, 0.5)

    @property
    def iqr_pct(self) -> float:
        """Interquartile range as a percentage of the median: the spread of single calls."""
        return 100.0 * (_quantile(self.times_ms, 0.75) - _quantile(self.times_ms, 0.25)) / self.median_ms


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def time_calls(fn: Callable[[], object], settings: TimingSettings, clock: CapturedClock, *, warmup_ms: int | None = None, rep_ms: int | None = None) -> Timing:
    """Time ``fn``: ``do_bench`` with CUDA, the host clock without (see module docstring)."""
    if clock.do_bench is not None:
        times = clock.do_bench(
            fn,
            warmup=settings.warmup_ms if warmup_ms is None else warmup_ms,
            rep=settings.rep_ms if rep_ms is None else rep_ms,
            return_mode="all",
        )
        return Timing([float(t) for t in times])
    for _ in range(settings.plain_warmup_calls):
        fn()
    times = []
    for _ in range(settings.plain_calls):
        clock.synchronize()
        start = clock.perf_counter()
        fn()
        clock.synchronize()
        times.append(1e3 * (clock.perf_counter() - start))
    return Timing(times)


def official_inputs(problem: Problem):
    """q, k, v exactly as CS336's timing code makes them: three views of one (3, ...) leaf."""
    q, k, v = torch.randn(3, *problem.shape, dtype=problem.dtype, device=problem.device, requires_grad=True)
    return q, k, v


def _bracketed(fn: Callable[[], object], settings: TimingSettings, clock: CapturedClock, bracket: Callable | None, label: str) -> Timing:
    """``time_calls(fn)`` inside ``bracket(label)`` (a context manager yielding a list that
    receives the per-call times; see ``worker.Evaluation.bracket``), or bare without one."""
    with (bracket(label) if bracket is not None else nullcontext([])) as times:
        timing = time_calls(fn, settings, clock)
        times += timing.times_ms
    return timing


def time_official(
    flash: Callable, problem: Problem, settings: TimingSettings, clock: CapturedClock, repeats: int = 1, bracket: Callable | None = None
) -> list[Timing]:
    """The official timing, ``repeats`` times on the same inputs (one Timing each, labelled
    ``official_1``, ... for ``bracket``)."""
    q, k, v = official_inputs(problem)

    def flash_forward_backward():
        o = flash(q, k, v, problem.is_causal)
        loss = o.sum()
        loss.backward()

    return [_bracketed(flash_forward_backward, settings, clock, bracket, f"official_{i + 1}") for i in range(repeats)]


def time_random_dO(flash: Callable, problem: Problem, settings: TimingSettings, clock: CapturedClock, bracket: Callable | None = None) -> Timing:
    """The official timing with ``o.backward(dO)`` for a fixed random dO instead of ``o.sum()``
    (labelled ``random_dO`` for ``bracket``)."""
    q, k, v = official_inputs(problem)
    dO = torch.randn(problem.shape, dtype=problem.dtype, device=problem.device)

    def flash_forward_backward_random_dO():
        o = flash(q, k, v, problem.is_causal)
        o.backward(dO)

    return _bracketed(flash_forward_backward_random_dO, settings, clock, bracket, "random_dO")


def matmul_tflops(problem: Problem, settings: TimingSettings, clock: CapturedClock) -> tuple[float, str]:
    """The rate of one square matrix product, in TFLOP/s, and a label for it.

    On a GPU: 8192^3 in bfloat16 (``torch.matmul``, cuBLAS), timed by do_bench. On a CPU: a
    256^3 float32 product on the host clock.
    """
    cuda = clock.do_bench is not None
    size = MATMUL_SIZE_GPU if cuda else MATMUL_SIZE_CPU
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(size, size, dtype=dtype, device=problem.device)
    b = torch.randn(size, size, dtype=dtype, device=problem.device)
    timing = time_calls(lambda: torch.matmul(a, b), settings, clock, warmup_ms=settings.matmul_warmup_ms, rep_ms=settings.matmul_rep_ms)
    label = f"{size}^3 {str(dtype).removeprefix('torch.')}"
    return matmul_flops(size) / (timing.median_ms * 1e-3) / 1e12, label
