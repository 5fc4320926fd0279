"""The official timing loop, followed literally, and the host-clock timer used without CUDA."""

import pytest

from leaderboard.config import CPU_TIMING, CPU_PROBLEM
from leaderboard.timing import Timing, matmul_tflops, official_inputs, time_calls, time_official, time_random_dO
from leaderboard.timer_guard import CapturedClock


class FakeClock:
    """A host clock that advances 1 s per reading, and a synchronize that counts its calls."""

    def __init__(self):
        self.now = 0.0
        self.syncs = 0

    def perf_counter(self):
        self.now += 1.0
        return self.now

    def synchronize(self):
        self.syncs += 1


def test_plain_timer_excludes_warmup_and_synchronizes_each_call():
    fake = FakeClock()
    clock = CapturedClock(fake.perf_counter, fake.synchronize, None, None, lambda xs: sorted(xs)[len(xs) // 2])
    calls = []
    timing = time_calls(lambda: calls.append(1), CPU_TIMING, clock)
    assert len(calls) == CPU_TIMING.plain_warmup_calls + CPU_TIMING.plain_calls
    assert timing.times_ms == [1000.0] * CPU_TIMING.plain_calls  # one clock tick per call
    assert fake.syncs == 2 * CPU_TIMING.plain_calls


def test_timing_statistics():
    timing = Timing([4.0, 1.0, 2.0, 3.0, 5.0])
    assert timing.median_ms == 3.0
    assert timing.iqr_pct == pytest.approx((4.0 - 2.0) / 3.0 * 100)


def test_official_inputs_are_views_of_one_leaf_and_accumulate_gradients():
    q, k, v = official_inputs(CPU_PROBLEM)
    assert q._base is k._base is v._base and q._base.requires_grad and q._base.shape == (3, *CPU_PROBLEM.shape)
    seen = []

    def fake_flash(q, k, v, is_causal):
        seen.append(is_causal)
        return q * k + v

    clock = CapturedClock(lambda: 0.0, lambda: None, None, None, None)
    timings = time_official(fake_flash, CPU_PROBLEM, CPU_TIMING, clock, repeats=2)
    assert len(timings) == 2 and all(seen)
    assert len(seen) == 2 * (CPU_TIMING.plain_warmup_calls + CPU_TIMING.plain_calls)
    random = time_random_dO(fake_flash, CPU_PROBLEM, CPU_TIMING, clock)
    assert len(random.times_ms) == CPU_TIMING.plain_calls


def test_cpu_matmul_rate_is_positive():
    import time

    clock = CapturedClock(time.perf_counter, lambda: None, None, None, None)
    tflops, label = matmul_tflops(CPU_PROBLEM, CPU_TIMING, clock)
    assert tflops > 0 and label == "256^3 float32"
