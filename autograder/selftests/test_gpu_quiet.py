"""A test marked ``alone_on_gpu`` gets the grade's GPU to itself (autograder/gpu_quiet.py).

First the lock, between real processes: shared holders run side by side, an alone holder runs
with no other, a waiting alone holder keeps new shared ones out (so it never waits behind a
stream of them), a killed holder frees it, and a wait has a limit; the grader's opening keeps
unmarked tests out until the marked ones have verdicts. Then a toy grade that believes it is on
a GPU: the marked test runs first, alone, and the two chains run the rest side by side.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from autograder import gpu_quiet
from autograder.gpu_quiet import GpuQuiet, Opening
from autograder.tools import grade_timeline

FORK = multiprocessing.get_context("fork")


def _holder(folder: str, alone: bool, hold_s: float, events, name: str, wait_limit_s: float | None = None) -> None:
    if wait_limit_s is not None:
        gpu_quiet.WAIT_LIMIT_S = wait_limit_s
    lock = GpuQuiet(Path(folder))
    asked = time.monotonic()
    with lock.hold(alone, on_wait=lambda: events.put((name, "waits", time.monotonic()))) as held:
        events.put((name, "in", time.monotonic(), held, time.monotonic() - asked))
        time.sleep(hold_s)
        events.put((name, "out", time.monotonic()))


def _start(folder: Path, alone: bool, hold_s: float, events, name: str, **extra):
    process = FORK.Process(target=_holder, args=(str(folder), alone, hold_s, events, name), kwargs=extra)
    process.start()
    return process


def _events(events, processes) -> dict[tuple[str, str], tuple]:
    for process in processes:
        process.join(30)
        assert process.exitcode == 0, f"a lock holder failed: exit code {process.exitcode}"
    seen = {}
    while not events.empty():
        event = events.get()
        seen[event[:2]] = event[2:]
    return seen


def test_shared_holders_run_together(tmp_path):
    events = FORK.Queue()
    processes = [_start(tmp_path, False, 0.5, events, name) for name in ("a", "b")]
    seen = _events(events, processes)
    assert seen[("b", "in")][0] < seen[("a", "out")][0] and seen[("a", "in")][0] < seen[("b", "out")][0], seen
    assert ("a", "waits") not in seen and ("b", "waits") not in seen, seen


def test_an_alone_holder_waits_for_running_tests_and_keeps_new_ones_out(tmp_path):
    events = FORK.Queue()
    first = _start(tmp_path, False, 0.8, events, "running")
    time.sleep(0.2)
    alone = _start(tmp_path, True, 0.5, events, "alone")
    time.sleep(0.2)
    late = _start(tmp_path, False, 0.1, events, "late")  # shares with "running", but the alone one asked first
    seen = _events(events, [first, alone, late])
    assert ("alone", "waits") in seen, "an alone holder must wait for the test already running"
    assert seen[("alone", "in")][0] >= seen[("running", "out")][0], seen
    assert seen[("late", "in")][0] >= seen[("alone", "out")][0], f"a new test started beside an alone one: {seen}"
    assert all(event[1] is True for key, event in seen.items() if key[1] == "in"), seen


def test_a_killed_holder_frees_the_gpu(tmp_path):
    events = FORK.Queue()
    stuck = _start(tmp_path, True, 600, events, "stuck")
    time.sleep(0.5)
    os.kill(stuck.pid, signal.SIGKILL)
    stuck.join(10)
    after = _start(tmp_path, True, 0.0, events, "after")
    seen = _events(events, [after])
    assert seen[("after", "in")][1] is True and seen[("after", "in")][2] < 5, seen


def test_a_wait_past_the_limit_goes_ahead_and_says_so(tmp_path, capfd):
    events = FORK.Queue()
    stuck = _start(tmp_path, True, 3.0, events, "stuck")
    time.sleep(0.3)
    late = _start(tmp_path, False, 0.0, events, "late", wait_limit_s=0.5)
    late.join(30)
    seen = _events(events, [late])
    stuck.kill()
    assert seen[("late", "in")][1] is False and 0.4 < seen[("late", "in")][2] < 2.5, seen
    assert "went ahead after waiting" in capfd.readouterr().err


def test_the_opening_keeps_unmarked_tests_out_until_the_marked_ones_have_verdicts(tmp_path):
    events = FORK.Queue()
    opening = Opening(tmp_path, {"visible", "hidden"})
    shared = _start(tmp_path, False, 0.0, events, "shared")
    alone = _start(tmp_path, True, 0.0, events, "alone")  # a marked test does not wait for the opening
    alone.join(30)
    time.sleep(0.3)
    opening.collected("visible", ["tests/test_a.py::test_timed"])
    opening.collected("visible", ["tests/test_a.py::test_timed", "tests/test_a.py::test_other"])  # a second chain
    opening.settled("tests/test_a.py::test_timed")
    time.sleep(0.3)
    assert opening.open, "the hidden suite has not collected: its marked tests may still come"
    opening.chain_ended("hidden")  # its chain ended without collecting (a failed start-up)
    assert not opening.open
    seen = _events(events, [shared])
    assert ("shared", "waits") in seen and ("alone", "waits") not in seen, seen
    assert seen[("shared", "in")][0] > seen[("alone", "in")][0] + 0.5, f"an unmarked test ran during the opening: {seen}"
    opening.release()  # twice is harmless


def test_a_verdict_that_comes_before_its_suite_collects_still_counts(tmp_path):
    opening = Opening(tmp_path, {"hidden"})
    opening.settled("t::marked")  # another chain of the suite settled it first
    opening.collected("hidden", ["t::marked"])
    assert not opening.open


def test_the_opening_ends_by_itself_after_its_limit(tmp_path):
    opening = Opening(tmp_path, {"hidden"}, limit_s=0.5)  # no chain ever reports
    began = time.monotonic()
    while opening.open and time.monotonic() - began < 10:
        time.sleep(0.05)
    assert not opening.open and 0.4 < time.monotonic() - began < 5
    with GpuQuiet(tmp_path).hold(alone=False) as held:
        assert held, "an unmarked test may start now"


QUIET_TESTS = '''
import json, time
import pytest

LOG = {log!r}


def _log(name, began):
    with open(LOG, "a") as handle:
        handle.write(json.dumps([name, began, time.monotonic()]) + "\\n")


@pytest.mark.parametrize("k", range(5))
def test_before(k):
    began = time.monotonic()
    time.sleep(0.5)
    _log(f"before{{k}}", began)


@pytest.mark.alone_on_gpu
def test_timed():  # position 5 of 22: without the opening, the first chain's sixth test, the second's mid-way
    began = time.monotonic()
    time.sleep(0.6)
    _log("alone", began)


@pytest.mark.parametrize("k", range(16))
def test_after(k):
    began = time.monotonic()
    time.sleep(0.5)
    _log(f"after{{k}}", began)
'''


def test_a_grade_on_a_gpu_runs_the_marked_test_first_alone_and_the_rest_side_by_side(monkeypatch, tmp_path):
    from autograder import chains as chains_module
    from autograder import grade as grade_module
    from autograder.schedule import FileTiming
    from autograder.selftests.toy_kit import build_toy_kit

    kit, submission, manifest = build_toy_kit(tmp_path)
    log = tmp_path / "times.jsonl"
    (kit / "autograder" / "hidden_tests" / "test_beta_hidden.py").write_text(
        textwrap.dedent(QUIET_TESTS.format(log=str(log))))
    table = {"autograder/hidden_tests/test_beta_hidden.py": FileTiming(cpu=30.0, gpu=30.0)}  # work for 2 chains
    monkeypatch.setattr(grade_module, "load_durations", lambda: table)
    monkeypatch.setattr(grade_module.gpus, "driver_present", lambda: True)  # the grader's view; the tests need none
    monkeypatch.setattr(grade_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(chains_module, "usable_cpus", lambda: 2)
    report = grade_module.grade(grade_module.GradeOptions(
        submission=submission, out=tmp_path / "out", kit=kit, manifest=manifest, jobs=2, problems=["beta"],
        quiet=True, test_timeout_s=60, timeline=tmp_path / "timeline.jsonl"))
    statuses = {test["name"].rsplit("::", 1)[1]: test["status"] for test in report.results["tests"]}
    assert statuses and set(statuses.values()) == {"passed"}, statuses
    spans = {name: (began, ended) for name, began, ended in map(json.loads, log.read_text().splitlines())}
    alone = spans.pop("alone")
    beside = [name for name, (began, ended) in spans.items() if began < alone[1] and alone[0] < ended]
    assert not beside, f"tests ran while the alone_on_gpu test did: {beside} ({spans}, alone {alone})"
    assert all(began >= alone[1] for began, ended in spans.values()), \
        f"the alone_on_gpu test did not run first, in the grade's opening: {spans}, alone {alone}"
    events = [json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    total, rows = grade_timeline.chain_times(events)
    assert [event["event"] for event in (events[0], events[-1])] == ["grade", "graded"], events
    assert sum(row.tests for row in rows) == len(statuses) and len(rows) == 2, rows
    together = [(a, b) for a in spans for b in spans if a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]
    assert together, f"the two chains' other tests never ran side by side: {spans}"


@pytest.mark.parametrize("on_gpu", [False, True])
def test_only_a_gpu_grade_gives_its_harness_processes_the_lock(monkeypatch, tmp_path, on_gpu):
    from autograder import grade as grade_module
    from autograder.selftests.toy_kit import build_toy_kit

    kit, submission, manifest = build_toy_kit(tmp_path)
    specs = []
    monkeypatch.setattr(grade_module.gpus, "driver_present", lambda: on_gpu)
    monkeypatch.setattr(grade_module, "run_chains", lambda given, jobs, **kwargs: (specs.extend(given), [])[1])
    grade_module.grade(grade_module.GradeOptions(submission=submission, out=tmp_path / "out", kit=kit,
                                                 manifest=manifest, jobs=1, problems=["alpha"], quiet=True))
    assert specs and all((spec.gpu_lock is not None) == on_gpu for spec in specs), [spec.gpu_lock for spec in specs]
