"""Run one test suite against a submission's intake copy in separate pytest processes, and survive it.

Read by staff changing how tests are run. The grader (autograder/grade.py) calls
``run_suite`` once per chain of test processes (a share of the tests of both suites, visible
``tests/`` and hidden ``autograder/hidden_tests/``). It
starts ``autograder/harness_pytest.py`` with a clean environment and reads the signed records of
autograder/pytest_plugin.py from a pipe (both in autograder/harness_process.py), under a watchdog:

- a test that runs past its time limit is killed with its whole process group (its time is the
  smaller of its wall and CPU time, with a wall-clock backstop: harness/cpu_clock.py);
- a process that dies (segfault, ``os._exit``, OOM killer, ``pytest.exit``) fails the test it
  was running, with the last lines it printed;
- a process that sends a forged record, or after whose test the harness was patched, fails
  that test;
and in each case a new process runs the tests that have no verdict yet, so one crash costs one
test. After ``crash_streak_limit`` such failures in a row among the tests of one problem, test
file and implementation (PyTorch or Triton, from the test's name), the remaining tests of that
group are failed without running (those that need a GPU on a runner without one stay "not
graded"), and after ``restart_limit`` restarts, or past the
grade's deadline, every remaining test is; so every test always gets a verdict in bounded time.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autograder.gpu_quiet import WAIT_LIMIT_S as GPU_WAIT_LIMIT_S
from autograder.harness_process import HarnessProcess, describe_exit
from autograder.protocol import ForgedRecord
from autograder.suite_spec import SuiteSpec, Verdict
from harness.cpu_clock import WALL_FACTOR, Budget
from harness.gpu_marker import not_graded_message

STARTUP_TIMEOUT_S = 300.0


TIME_LIMIT_RAN_OUT = "the grading time limit ran out"  # in the message of every test the grade's limit cut off


@dataclass
class SuiteRun:
    """What came back: verdicts in collection order, collection errors, and run facts."""

    name: str
    outcomes: dict[str, Verdict] = field(default_factory=dict)
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    gpus: int | None = None  # CUDA GPUs the test process saw
    restarts: int = 0
    wall_s: float = 0.0
    startup_failure: str | None = None
    files: list[str] = field(default_factory=list)
    shard: int = 0  # the chain's index in its suite (SuiteSpec.shard)
    collected: list[str] = field(default_factory=list)  # the node ids its test process collected


# -- the watchdog loop -----------------------------------------------------------------


def run_suite(spec: SuiteSpec) -> SuiteRun:
    """Run every test of ``spec.files``; every collected test gets a verdict (see the module docstring).

    One test process after another (``_Watch``), until every collected test has a verdict
    (``_Ledger``), the grade's deadline passes or the restart limit is reached."""
    ledger = _Ledger(spec)
    started = time.monotonic()
    index = 0
    while ledger.pending is None or ledger.pending:
        stop = ledger.stop_reason()
        if stop is not None:
            ledger.fail_all(stop)
            break
        files = spec.files
        if ledger.pending is not None:
            wanted = {nodeid.split("::", 1)[0] for nodeid in ledger.pending}
            files = [path for path in spec.files if path.relative_to(spec.kit).as_posix() in wanted]
        child = HarnessProcess(spec, files, ledger.pending if ledger.pending is not None else spec.select, index)
        timeline_line(spec, "spawn")
        index += 1
        watch = _Watch(ledger, child)
        watch.run()
        if not ledger.after(watch, child.finish()):
            break
    ledger.result.wall_s = time.monotonic() - started
    return ledger.result


class _Ledger:
    """A suite run's verdicts across its test processes: the tests still without one (``pending``,
    None until a process has collected), each test's GPU count, and the crash streaks."""

    def __init__(self, spec: SuiteSpec):
        self.spec = spec
        self.result = SuiteRun(spec.name, files=[path.relative_to(spec.kit).as_posix() for path in spec.files],
                               shard=spec.shard)
        self.pending: list[str] | None = None
        self.gpu: dict[str, int] = {}  # node id -> CUDA GPUs the test needs (its gpu marker's count; 0 if none)
        self.streak: dict[tuple, int] = defaultdict(int)

    def stop_reason(self) -> str | None:
        """Why no further test process may start (the grade's deadline, the restart limit), or None."""
        if time.monotonic() >= self.spec.deadline:
            return f"not run: {TIME_LIMIT_RAN_OUT} before this test started"
        if self.result.restarts > self.spec.restart_limit:
            return (f"not run: the test process was restarted {self.spec.restart_limit} times "
                    "(crashes, hangs or tampering); remaining tests are failed")
        return None

    def collected(self, record: dict) -> None:
        """A test process collected: the first one's list is the suite's."""
        self.result.gpus = int(record.get("gpus", 0))
        if self.pending is None:
            self.pending = [item["nodeid"] for item in record["items"]]
            self.result.collected = list(self.pending)
            self.gpu.update({item["nodeid"]: int(item["gpu"]) for item in record["items"]})
            self.spec.on_collected(self.spec.name, [item["nodeid"] for item in record["items"] if item.get("alone")])

    def drop(self, nodeid: str) -> None:
        """No verdict is needed here any more: settled, or another chain of the suite has it."""
        if self.pending is not None and nodeid in self.pending:
            self.pending.remove(nodeid)

    def settle(self, nodeid: str, outcome: Verdict, crash: bool, ran: bool = False) -> None:
        """Record ``nodeid``'s verdict. One the watchdog gives without the test process (``ran``
        False: a crash streak, the time limit) counts only if no other chain of the suite has the test."""
        spec = self.spec
        if spec.pool is not None and not ran and not spec.pool.claim(nodeid):
            self.drop(nodeid)
            return
        outcome.gpu = self.gpu.get(nodeid, 0) > 0
        self.result.outcomes[nodeid] = outcome
        self.drop(nodeid)
        spec.on_result(f"{spec.name}#{spec.shard}", outcome)
        group = _streak_group(nodeid, spec.problem_of(nodeid))
        self.streak[group] = self.streak[group] + 1 if crash else 0
        if crash and self.streak[group] >= spec.crash_streak_limit:
            message = (f"not run: {self.streak[group]} tests of {group[1]} in a row crashed or hung, so the "
                       "remaining tests of that file and implementation were failed without running; fix those first")
            for other in [n for n in (self.pending or []) if _streak_group(n, spec.problem_of(n)) == group]:
                if self.result.gpus is not None and self.gpu.get(other, 0) > self.result.gpus:
                    self.settle(other, Verdict(other, "not_graded", not_graded_message(self.gpu[other],
                                                                                       self.result.gpus)), crash=False)
                else:
                    self.settle(other, Verdict(other, "failed", message), crash=False)

    def fail_all(self, message: str) -> None:
        for nodeid in list(self.pending or []):
            self.settle(nodeid, Verdict(nodeid, "failed", message), crash=False)

    def after(self, watch: _Watch, status: int | None) -> bool:
        """Settle what a test process's end leaves (the test it was running fails, with why); True
        if another test process should run the tests still pending."""
        child, current = watch.child, watch.current
        problem = watch.problem
        if problem is None and current is not None:
            problem = f"the test process {describe_exit(status)} during this test"
        if self.pending is None:
            self.result.startup_failure = (
                f"{problem or 'the test process ' + describe_exit(status) + ' before collecting the tests'}"
                f"\n{child.output_tail()}"
            )
            return False
        progress = watch.progress
        if current is not None and current in self.pending:
            tail = child.output_tail()
            message = problem + ("; its last output:\n" + tail if tail else "")
            timeline_line(self.spec, "end", current, cpu=_cpu_seconds(watch.budget), killed=True)
            self.settle(current, Verdict(current, "failed", message.strip()), crash=True, ran=True)
            progress = True
        elif problem is not None and not progress:
            self.fail_all(f"not run: {problem}")
            return False
        if self.pending and not progress:
            self.fail_all(f"not run: the test process {describe_exit(status)} without running this test\n"
                          f"{child.output_tail()}")
            return False
        if self.pending:
            self.result.restarts += 1
            self.spec.on_note(f"{self.spec.name}#{self.spec.shard}",
                              f"restarting the test process for {len(self.pending)} remaining test(s)")
        return bool(self.pending)


class _Watch:
    """The watchdog over one test process, reading its records until it ends or is killed.

    Its ``state`` is one of: ``collecting`` (a first process, before its collection), ``between``
    (no test running: collection, set-up, start-up; limit STARTUP_TIMEOUT_S), ``waiting`` (a test
    waits for the GPU lock: GPU_WAIT_LIMIT_S more) and ``running`` (a test runs, charged to
    ``budget``: its CPU time, with a wall-clock backstop). Each state's limit, and the grade's
    deadline, end the process when passed; ``problem`` then says why. ``current`` is the test
    running when it ended; ``progress`` whether any test got a verdict (or was claimed elsewhere).
    """

    def __init__(self, ledger: _Ledger, child: HarnessProcess):
        self.ledger, self.spec, self.child = ledger, ledger.spec, child
        self.state = "collecting" if ledger.pending is None else "between"
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S  # of the states other than running
        self.budget: Budget | None = None  # the running test's time (harness/cpu_clock.py)
        self.current: str | None = None
        self.progress = False
        self.problem: str | None = None

    def run(self) -> None:
        try:
            while not self.child.eof:
                now = time.monotonic()
                limit = min(self.budget.wall_deadline() if self.budget is not None else self.deadline,
                            self.spec.deadline)
                if now >= limit or (self.budget is not None and self.budget.expired()):
                    self.problem = self._why_stopped(now)
                    self.child.kill()
                    return
                for record in self.child.records(min(1.0, limit - now)):
                    self._read(record)
        except ForgedRecord as error:
            self.child.kill()
            self.problem = f"the test process sent a forged result record ({error})"

    def _why_stopped(self, now: float) -> str:
        if self.state == "collecting" and self.current is None:
            return f"the test process did not finish collecting within {STARTUP_TIMEOUT_S:.0f} s"
        if now >= self.spec.deadline:
            return f"{TIME_LIMIT_RAN_OUT} while this test was running"
        if self.budget is not None:
            return _timed_out(self.budget)
        return f"timed out: still running after {STARTUP_TIMEOUT_S:.0f} s between tests"

    def _between(self) -> None:
        self.state, self.current, self.budget = "between", None, None
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S

    def _read(self, record: dict) -> None:
        ledger, spec, kind = self.ledger, self.spec, record["type"]
        if kind == "collect_error":
            ledger.result.collect_errors.append((record["nodeid"], record.get("message", "")))
        elif kind == "collected":
            ledger.collected(record)
            self.state, self.budget = "between", None
            self.deadline = time.monotonic() + STARTUP_TIMEOUT_S
        elif kind == "finished":
            self.child.eof = True
        elif kind == "waiting" and self.current is None:  # for the GPU lock (autograder/gpu_quiet.py)
            timeline_line(spec, "wait", record.get("nodeid", ""))
            self.state = "waiting"
            self.deadline = time.monotonic() + GPU_WAIT_LIMIT_S + STARTUP_TIMEOUT_S
        elif kind == "start":
            pending = ledger.pending
            if self.current is not None and pending is not None and self.current in pending:
                ledger.settle(self.current, Verdict(self.current, "failed", "the test process reported no verdict "
                                                    "for this test (the grader's reporting was interfered with)"),
                              crash=True, ran=True)
            self.state, self.current = "running", record["nodeid"]
            timeline_line(spec, "start", self.current)
            child = self.child
            self.budget = Budget(spec.test_timeout_s, WALL_FACTOR * spec.test_timeout_s, lambda: child.process.pid)
        elif kind == "result":
            nodeid = record["nodeid"]
            if ledger.pending is None or nodeid not in ledger.pending:
                return
            self.progress = True
            timeline_line(spec, "end", nodeid, cpu=_cpu_seconds(self.budget))
            self._between()
            ledger.settle(nodeid, _outcome(record, ledger.gpu.get(nodeid, 0), ledger.result.gpus), crash=False,
                          ran=True)
        elif kind == "elsewhere":  # another chain of the suite claimed it first (test_pool.py)
            ledger.drop(record["nodeid"])
            self.progress = True


def timeline_line(spec: SuiteSpec, event: str, nodeid: str = "", **extra) -> None:
    """Append one event of the chain to ``spec.timeline`` (``grade --timeline``), if given:
    "spawn" (a test process starts), "wait" (a test waits for the GPU lock), "start" and "end" (a
    test's verdict came, or ``killed``: its process died or was stopped; ``cpu``: its processes'
    CPU seconds)."""
    if spec.timeline is not None:
        append_timeline(spec.timeline, event, f"{spec.name}#{spec.shard}", nodeid, **extra)


def _cpu_seconds(budget: Budget | None) -> float | None:
    """The running test's CPU seconds so far, for the timeline (None between tests)."""
    return round(budget.cpu() or 0.0, 2) if budget is not None else None


def append_timeline(path: Path, event: str, chain: str = "", nodeid: str = "", **extra) -> None:
    """One JSON line: the wall-clock time, the event, the chain and the test."""
    line = json.dumps({"t": round(time.time(), 3), "event": event, "chain": chain, "nodeid": nodeid, **extra})
    with open(path, "a") as out:  # one short append: whole lines, whichever thread writes
        out.write(line + "\n")


def _timed_out(budget: Budget) -> str:
    """Why the watchdog stopped a test: its limit (CPU time) or the wall-clock backstop."""
    wall, cpu = budget.wall(), budget.cpu()
    if wall >= budget.wall_limit_s and (cpu is None or cpu < budget.limit_s):
        return (f"timed out: still running after {wall:.0f} s on the clock, the most any test may take "
                f"(its processes used {cpu if cpu is not None else wall:.0f} s of CPU time: they were waiting on something)")
    return (f"timed out: still running after {budget.limit_s:.0f} s (counted as CPU time, "
            f"{cpu if cpu is not None else wall:.0f} s, and {wall:.0f} s on the clock)")


def _streak_group(nodeid: str, problem: str) -> tuple[str, str, str]:
    """What a crash streak counts within: (problem, test file, implementation). A test whose name
    says "triton" or "pytorch" belongs to that implementation, so crashes of one Function's tests
    never stop the other's (a problem such as flash_backward mixes both)."""
    path, _, name = nodeid.partition("::")
    implementation = "triton" if "triton" in name.lower() else "pytorch" if "pytorch" in name.lower() else ""
    return (problem, path, implementation)


def _outcome(record: dict, gpus_needed: int, gpus_present: int | None) -> Verdict:
    nodeid = record["nodeid"]
    duration = float(record.get("duration", 0.0))
    kind = record["outcome"]
    if kind == "passed":
        return Verdict(nodeid, "passed", duration=duration)
    if kind == "skipped" and gpus_needed > (gpus_present or 0):
        return Verdict(nodeid, "not_graded", not_graded_message(gpus_needed, gpus_present or 0), duration=duration)
    if kind == "skipped":
        return Verdict(nodeid, "failed", f"skipped ({record.get('message', '')}); a skipped test earns no points",
                           duration=duration)
    return Verdict(nodeid, "failed", record.get("message", ""), record.get("text", ""), duration=duration)
