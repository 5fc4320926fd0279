"""The grader's pytest plugin: runs inside the harness process and reports each test's outcome.

Read by whoever changes how the grader talks to its test processes (see autograder/watchdog.py
for the other side). In order, the plugin:

1. at configure: reads the run's secret key from a pipe and closes it, so that only this plugin
   can sign records;
2. at collection: keeps only the tests the grader asked for, sends the collected list
   (node id, gpu marker) and any collection errors; in a pooled suite it starts at this chain's
   point and runs only the tests it claims first, saying "elsewhere" for the rest
   (autograder/test_pool.py);
3. per test: on a GPU grade, takes the grade's GPU lock (autograder/gpu_quiet.py: alone for a
   test marked ``alone_on_gpu``, else shared; "waiting" tells the watchdog when it has to wait),
   then sends "start" before the test runs and "result" after its teardown.

The submission never runs in this process: the kit's conftest starts an executor for it
(``--isolate``, executor/), as its own unprivileged user when the grader is root, and
the tests judge what comes back. So these records are the harness's own; the signature only
proves to the grader that a record came from this process and not from something that
printed or wrote a file.
"""

from __future__ import annotations

import ctypes
import json
import os
import sysconfig
import time
import types
from pathlib import Path

import pytest

from autograder.gpu_quiet import MARKER as ALONE_ON_GPU, GpuQuiet
from autograder.protocol import KEY_BYTES, Signer
from autograder.test_pool import Pool, rotated

_PR_SET_DUMPABLE = 4
_MAX_TEXT = 8000
_KIT_PREFIX = f"{Path(__file__).resolve().parents[1]}/"  # the grading machine's kit folder, which no student sees
# The grading machine's library folders (site-packages, the standard library), longest first.
_LIBRARY_PREFIXES = sorted({f"{path}/" for key in ("purelib", "platlib", "stdlib", "platstdlib")
                            if (path := sysconfig.get_paths().get(key))}, key=len, reverse=True)


def _not_dumpable() -> None:
    """Keep other users' processes (the executor) out of this one's memory and /proc entries."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _read_key(fd: int) -> bytes:
    key = b""
    while len(key) < KEY_BYTES:
        chunk = os.read(fd, KEY_BYTES - len(key))
        if not chunk:
            break
        key += chunk
    os.close(fd)
    if len(key) != KEY_BYTES:
        raise RuntimeError("the grader did not send a complete key")
    return key


def head_and_tail(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` characters: its start and its end, with a marker
    between. The start holds the first failure (Hypothesis reports its first falsifying example
    and that example's error there), the end the last lines of the last traceback."""
    if len(text) <= limit:
        return text
    head = limit // 2
    marker = f"\n... [{len(text) - limit} characters left out] ...\n"
    return text[:head] + marker + text[len(text) - (limit - head):]


def kit_relative(text: str) -> str:
    """``text`` with the kit's absolute folder left out of every path (``tests/test_x.py:12``, not
    the grading machine's ``/autograder/source/kit/tests/test_x.py:12``)."""
    text = text.replace(_KIT_PREFIX, "")
    for prefix in _LIBRARY_PREFIXES:  # torch's own frames: where the grader's Python lives is not the student's business
        text = text.replace(prefix, "")
    return text


def _text(report) -> str:
    text = kit_relative(getattr(report, "longreprtext", "") or "")
    return head_and_tail(text, _MAX_TEXT)


def _crash_line(report) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return kit_relative(str(crash.message))[:_MAX_TEXT]
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        return str(longrepr[2])[:_MAX_TEXT]
    return _text(report).strip().splitlines()[-1][:_MAX_TEXT] if _text(report).strip() else ""


class GraderPlugin:
    """Registered by autograder/harness_pytest.py; see the module docstring for the protocol."""

    def __init__(self, *, key_fd: int, record_fd: int, run_only: list[str] | None, pool: Pool | None = None,
                 gpu_quiet: GpuQuiet | None = None):
        self._key_fd = key_fd
        self._gpu_quiet = gpu_quiet
        self._record_fd = record_fd
        self._run_only = None if run_only is None else set(run_only)
        self._pool = pool
        self._signer: Signer | None = None

    # -- setup --------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        _not_dumpable()
        self._signer = Signer(_read_key(self._key_fd), self._record_fd)
        self._signer.send({"type": "hello", "pid": os.getpid()})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        if self._run_only is not None:
            dropped = [item for item in items if item.nodeid not in self._run_only]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item.nodeid in self._run_only]
        if self._pool is not None:  # this chain's starting point in its suite (autograder/test_pool.py)
            order = rotated([item.nodeid for item in items], self._pool.weights, self._pool.start)
            items[:] = [items[position] for position in order]
        if self._gpu_quiet is not None:  # during the grade's opening, while nothing else runs (gpu_quiet.py)
            items.sort(key=lambda item: not _alone(item))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        """With a pool: run only the tests this chain claims first, and say "elsewhere" for the others."""
        if self._pool is None or session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        items = session.items

        def next_claimed(position: int) -> int | None:
            for candidate in range(position, len(items)):
                if self._pool.claim(items[candidate].nodeid):
                    return candidate
                self._signer.send({"type": "elsewhere", "nodeid": items[candidate].nodeid})
            return None

        current = next_claimed(0)
        while current is not None:
            following = next_claimed(current + 1)  # claimed ahead: pytest's teardown needs the next test
            items[current].config.hook.pytest_runtest_protocol(
                item=items[current], nextitem=items[following] if following is not None else None)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
            current = following
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self._gpu_quiet is None:
            yield
            return
        alone = _alone(item)
        waiting = {"type": "waiting", "nodeid": item.nodeid, "alone": alone}
        with self._gpu_quiet.hold(alone, on_wait=lambda: self._signer.send(waiting)):
            yield

    def pytest_collectreport(self, report):
        if report.failed:
            self._signer.send({"type": "collect_error", "nodeid": report.nodeid, "message": _text(report)})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        from harness import gpus  # the kit's harness package, as the root conftest
        from harness.gpu_marker import gpus_needed

        items = [{"nodeid": item.nodeid, "gpu": gpus_needed(item), "alone": _alone(item)} for item in session.items]
        self._signer.send({"type": "collected", "items": items, "gpus": gpus.count()})
        triton = {item.nodeid for item in session.items if _runs_triton(item)}
        session.config.pluginmanager.register(_reporter(self._signer, getattr(session.config, "executor", None), triton),
                                              "cs336-grader-reporter")

    def pytest_sessionfinish(self, session, exitstatus):
        if self._signer is not None:
            self._signer.send({"type": "finished", "exitstatus": int(exitstatus)})


def _runs_triton(item) -> bool:
    """Whether the test runs the submission's Triton kernels (so their launches are replayed): marked
    ``triton``, or "triton" in its name or parameters (the hidden tests' implementation parameter)."""
    return item.get_closest_marker("triton") is not None or "triton" in item.nodeid.split("::", 1)[-1].lower()


def _alone(item) -> bool:
    """Whether the test is marked to run alone on the GPU (autograder/gpu_quiet.py)."""
    return item.get_closest_marker(ALONE_ON_GPU) is not None


def _verdict(nodeid: str, phases: dict, duration: float) -> dict:
    """The result record of one test from its setup/call/teardown reports."""
    record = {"type": "result", "nodeid": nodeid, "duration": round(duration, 3)}
    for when in ("setup", "call", "teardown"):
        report = phases.get(when)
        if report is None:
            continue
        if report.failed:
            return {**record, "outcome": "failed", "phase": when, "message": _crash_line(report),
                    "text": _text(report)}
        if report.skipped:
            return {**record, "outcome": "skipped", "phase": when, "message": _crash_line(report), "text": ""}
        if hasattr(report, "wasxfail"):
            return {**record, "outcome": "failed", "phase": when,
                    "message": f"marked xfail ({report.wasxfail}); an expected failure earns no points", "text": ""}
    if "call" not in phases:
        return {**record, "outcome": "failed", "phase": "call", "message": "the test body never ran", "text": ""}
    return {**record, "outcome": "passed"}


def _reporter(signer: Signer, executor, triton: set[str] = frozenset()) -> types.SimpleNamespace:
    """The per-test hooks: "start" when a test begins, its verdict after its teardown; then, if the
    submission's executor failed during the test, its replacement is started. Before "start" (from
    which the grader's watchdog charges the test), the executor has answered and, for a test in
    ``triton`` (node ids), so has the replay process: a test's charge never holds a start-up, so it
    does not depend on what ran before it in its process."""
    send = signer.send
    clock, phases_of, started_at = time.monotonic, {}, {}

    def pytest_runtest_logstart(nodeid, location):
        if executor is not None:
            executor.ready(replays=nodeid in triton)
        phases_of[nodeid] = {}
        started_at[nodeid] = clock()
        send({"type": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(report):
        phases = phases_of.setdefault(report.nodeid, {})
        phases[report.when] = report
        if report.when != "teardown":
            return
        duration = clock() - started_at.pop(report.nodeid, clock())
        send(_verdict(report.nodeid, phases, duration))
        if executor is not None:
            executor.restart_if_failed()  # between tests: outside every test's time limit

    return types.SimpleNamespace(pytest_runtest_logstart=pytest_runtest_logstart,
                                 pytest_runtest_logreport=pytest_runtest_logreport)


def load_selection(path: str | None) -> tuple[list[str] | None, Pool | None]:
    """What this test process runs, from the JSON file the grader wrote (none: everything): (the
    node ids to run, None for all; its chain's share of a pooled suite, autograder/test_pool.py)."""
    if not path:
        return None, None
    with open(path) as handle:
        data = json.load(handle)
    nodeids = data.get("nodeids")
    pool = Pool.from_json(data["pool"]) if data.get("pool") else None
    return (None if nodeids is None else [str(n) for n in nodeids]), pool
