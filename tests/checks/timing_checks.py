"""Checks of a timer ``time_steps`` (§1.1), as plain functions.

Read by tests/test_benchmarking_script.py and by the hidden tests, which pass the submission's
``time_steps`` (through ``adapters.run_time_steps``), and by the kit's self-tests, which pass
deliberately broken timers to prove that these checks reject them. Each check raises
AssertionError with a message that says what the timer did wrong.

The main tool is a fake clock that only moves when the step or the sync runs: warm-up steps
cost 100 s, measured steps 1 s, a sync 0.25 s. A correct timer therefore returns exactly
1.25 s per measured step; a timer that times warm-up steps returns 101.25 s somewhere (or
too many times), and one that reads the clock before the sync returns 1.0 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

TimeSteps = Callable[..., list[float]]

WARMUP_COST_S = 100.0
STEP_COST_S = 1.0
SYNC_COST_S = 0.25


class FakeDevice:
    """A fake clock plus a fake step and a fake sync that advance it and log what happened."""

    def __init__(self, warmup_steps: int, start: float = 0.0):
        self.warmup_steps = warmup_steps
        self.now = start
        self.steps = 0
        self.events: list[str] = []

    def timer(self) -> float:
        self.events.append("timer")
        return self.now

    def step(self) -> None:
        self.steps += 1
        self.now += WARMUP_COST_S if self.steps <= self.warmup_steps else STEP_COST_S
        self.events.append("step")

    def synchronize(self) -> None:
        self.now += SYNC_COST_S
        self.events.append("sync")


def _run(time_steps: TimeSteps, warmup_steps: int, measure_steps: int, start: float = 0.0):
    device = FakeDevice(warmup_steps, start)
    times = time_steps(
        device.step,
        warmup_steps=warmup_steps,
        measure_steps=measure_steps,
        synchronize=device.synchronize,
        timer=device.timer,
    )
    return device, times


def check_returns_one_float_per_measured_step(time_steps: TimeSteps, warmup_steps: int = 2, measure_steps: int = 3):
    """The result is a list of ``measure_steps`` floats, and every step ran."""
    device, times = _run(time_steps, warmup_steps, measure_steps)
    assert isinstance(times, list), f"time_steps must return a list of floats; got {type(times).__name__}"
    assert len(times) == measure_steps, (
        f"with warmup_steps={warmup_steps}, measure_steps={measure_steps}, time_steps must return "
        f"{measure_steps} times (one per measured step, none for warm-up steps); got {len(times)}"
    )
    assert all(isinstance(t, float) for t in times), f"every time must be a float (seconds); got {times!r}"
    assert device.steps == warmup_steps + measure_steps, (
        f"step_fn must run warmup_steps + measure_steps = {warmup_steps + measure_steps} times; "
        f"it ran {device.steps} times"
    )


def check_excludes_warmup(time_steps: TimeSteps, warmup_steps: int = 2, measure_steps: int = 3):
    """Warm-up steps run but are not timed: no measured time contains a warm-up step."""
    device, times = _run(time_steps, warmup_steps, measure_steps)
    assert device.steps == warmup_steps + measure_steps, (
        f"step_fn must run warmup_steps + measure_steps = {warmup_steps + measure_steps} times; "
        f"it ran {device.steps} times"
    )
    slow = [t for t in times if t >= WARMUP_COST_S]
    assert not slow and len(times) == measure_steps, (
        f"warm-up steps must not be timed. With a fake clock where each of the {warmup_steps} "
        f"warm-up steps takes {WARMUP_COST_S} s and each measured step {STEP_COST_S + SYNC_COST_S} s "
        f"(sync included), time_steps returned {times}: expected {measure_steps} times of "
        f"{STEP_COST_S + SYNC_COST_S} s"
    )


def _diagnosis(times: list[float]) -> str:
    """What a list of times from the fake clock says went wrong ("" when it says nothing clear)."""
    if not times:
        return ""
    if all(t == pytest.approx(STEP_COST_S) for t in times):
        return "The times miss the sync: call synchronize() before reading the timer at the end."
    if any(t >= WARMUP_COST_S for t in times):
        return "A time includes warm-up steps: read the timer for the first time after the warm-up."
    if all(abs(t) < SYNC_COST_S for t in times):
        return ("The times are not differences of readings of the timer passed in (a step moves that clock by "
                f"{STEP_COST_S} s): read time only through timer().")
    return ""


def check_sync_inside_timed_region(time_steps: TimeSteps, warmup_steps: int = 2, measure_steps: int = 3):
    """Each measured time covers the step and the sync after it, and nothing else."""
    device, times = _run(time_steps, warmup_steps, measure_steps)
    expected = [STEP_COST_S + SYNC_COST_S] * measure_steps
    assert times == pytest.approx(expected), (
        f"each measured time must cover step_fn() and the synchronize() after it, read with the "
        f"timer passed in. With a fake clock where a step takes {STEP_COST_S} s and a sync "
        f"{SYNC_COST_S} s, expected {expected}; got {times}. " + _diagnosis(times)
    )


def check_syncs_after_every_step(time_steps: TimeSteps, warmup_steps: int = 2, measure_steps: int = 3):
    """synchronize() runs exactly once after every step, warm-up steps included."""
    device, _ = _run(time_steps, warmup_steps, measure_steps)
    calls = [event for event in device.events if event != "timer"]
    expected = ["step", "sync"] * (warmup_steps + measure_steps)
    assert calls == expected, (
        "synchronize() must be called once right after every step_fn() call, warm-up steps "
        f"included; the calls were {calls}, expected {expected}"
    )


def check_uses_given_timer(time_steps: TimeSteps, warmup_steps: int = 1, measure_steps: int = 2):
    """All times come from the ``timer`` argument (here a fake clock far from perf_counter's)."""
    start = 1.0e9
    device, times = _run(time_steps, warmup_steps, measure_steps, start=start)
    assert "timer" in device.events, "time_steps never called the timer it was given; read time only through it"
    expected = [STEP_COST_S + SYNC_COST_S] * measure_steps
    assert times == pytest.approx(expected), (
        f"each time must be the timer's reading after step_fn() and synchronize() minus its reading "
        f"before step_fn(). With the timer passed in (a fake clock starting at {start:.0f} s, where a "
        f"step takes {STEP_COST_S} s and a sync {SYNC_COST_S} s), expected {expected}; got {times}. "
        + _diagnosis(times)
    )


def check_real_sync_is_timed(time_steps: TimeSteps, sync_s: float = 0.03, warmup_s: float = 0.3):
    """With the default timer (time.perf_counter) and a sync that sleeps, each time includes the sleep."""
    steps = {"n": 0}

    def step():
        steps["n"] += 1
        if steps["n"] == 1:
            time.sleep(warmup_s)  # the one warm-up step is slow, like a first CUDA call

    times = time_steps(
        step, warmup_steps=1, measure_steps=3, synchronize=lambda: time.sleep(sync_s), timer=time.perf_counter
    )
    assert len(times) == 3, f"expected 3 times for measure_steps=3; got {times}"
    assert all(t >= sync_s for t in times), (
        f"each step's time must include the synchronize() after it, which sleeps {sync_s} s here; got {times}. "
        "Read the timer the second time after synchronize() returns."
    )
    assert all(t < warmup_s for t in times), (
        f"the warm-up step (which sleeps {warmup_s} s) must not be timed; got {times}"
    )


ALL_CHECKS = (
    check_returns_one_float_per_measured_step,
    check_excludes_warmup,
    check_sync_inside_timed_region,
    check_syncs_after_every_step,
    check_uses_given_timer,
    check_real_sync_is_timed,
)
