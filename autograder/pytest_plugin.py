"""The grader's pytest plugin: runs inside the test process and reports each test's outcome.

Read by whoever changes how the grader talks to its test processes (see autograder/runner.py
for the other side). In order, the plugin:

1. at configure: reads the run's secret key from a pipe and closes it (before any student
   code exists), so that only this plugin can sign records;
2. at collection: keeps only the tests the grader asked for, sends the collected list
   (node id, gpu marker) and any collection errors;
3. after collection: photographs the harness (autograder/tamper_guard.py), then drops
   root privileges to the sandbox user when the grader asks for it, so that student code,
   which is first imported by the first test, cannot read the hidden tests' files or
   write anything of the grader's;
4. per test (through hooks built in step 3, see ``_reporter``): sends "start" before it runs
   and "result" after its teardown, failing the test when the harness was patched during it.

Student code shares this process, so these records are only as honest as the process; the
signatures stop forged files and printed lines, the tamper guard catches patched harnesses,
and the grader treats a process that dies, hangs or goes silent as failing the running test.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
import types

import pytest

from autograder.protocol import KEY_BYTES, Signer
from autograder.tamper_guard import TamperGuard

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_MAX_TEXT = 8000


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good (no way back, no setuid binaries, not traceable)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError(f"could not drop privileges to uid {uid}")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_PDEATHSIG, 9)


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


def _text(report) -> str:
    text = getattr(report, "longreprtext", "") or ""
    return text[-_MAX_TEXT:]


def _crash_line(report) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:_MAX_TEXT]
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        return str(longrepr[2])[:_MAX_TEXT]
    return _text(report).strip().splitlines()[-1][:_MAX_TEXT] if _text(report).strip() else ""


def _trusted_roots(config) -> tuple[str, ...]:
    """Folders whose code is ours or the installed libraries' (everything but the submission)."""
    import sysconfig

    import torch

    roots = {str(config.rootpath), sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"], os.path.dirname(os.path.dirname(torch.__file__)),
             os.path.dirname(os.path.dirname(pytest.__file__))}
    roots |= {os.path.realpath(root) for root in roots if root}
    return tuple(os.path.join(root, "") for root in roots if root)


class GraderPlugin:
    """Registered by autograder/test_process.py; see the module docstring for the protocol."""

    def __init__(self, *, key_fd: int, record_fd: int, run_only: list[str] | None, sandbox_uid: int | None,
                 sandbox_gid: int | None):
        self._key_fd = key_fd
        self._record_fd = record_fd
        self._run_only = None if run_only is None else set(run_only)
        self._uid = sandbox_uid
        self._gid = sandbox_gid
        self._signer: Signer | None = None

    # -- setup --------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        self._signer = Signer(_read_key(self._key_fd), self._record_fd)
        self._signer.send({"type": "hello", "pid": os.getpid()})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        if self._run_only is None:
            return
        keep = [item for item in items if item.nodeid in self._run_only]
        dropped = [item for item in items if item.nodeid not in self._run_only]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def pytest_collectreport(self, report):
        if report.failed:
            self._signer.send({"type": "collect_error", "nodeid": report.nodeid, "message": _text(report)})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        import torch  # already imported by the root conftest

        items = [{"nodeid": item.nodeid, "gpu": item.get_closest_marker("gpu") is not None} for item in session.items]
        self._signer.send({"type": "collected", "items": items, "cuda": bool(torch.cuda.is_available())})
        guard = TamperGuard(trusted_roots=_trusted_roots(session.config)).photograph()
        session.config.pluginmanager.register(_reporter(self._signer, guard), "cs336-grader-reporter")
        if self._uid is not None:
            drop_privileges(self._uid, self._gid)

    def pytest_sessionfinish(self, session, exitstatus):
        if self._signer is not None:
            self._signer.send({"type": "finished", "exitstatus": int(exitstatus)})


def _verdict(nodeid: str, phases: dict, duration: float, changes: list[str]) -> dict:
    """The result record of one test from its setup/call/teardown reports."""
    record = {"type": "result", "nodeid": nodeid, "duration": round(duration, 3)}
    if changes:
        return {**record, "outcome": "tampered", "message": "; ".join(changes), "text": ""}
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


def _reporter(signer: Signer, guard: TamperGuard) -> types.SimpleNamespace:
    """The per-test hooks, built before any student code runs.

    Everything they call is captured here, in closures, together with the code objects it must
    still have: student code that later replaces a function of this module, a method of the
    guard or of the signer, or their code, finds the hooks still calling the originals, and
    the originals reporting the change.
    """
    changes, verdict, send = guard.changes, _verdict, signer.send
    originals = ((changes.__func__, changes.__func__.__code__), (verdict, verdict.__code__),
                 (send.__func__, send.__func__.__code__), (_crash_line, _crash_line.__code__),
                 (_text, _text.__code__))
    clock, phases_of, started_at = time.monotonic, {}, {}

    def own_code_changed() -> list[str]:
        return [f"the grader's {function.__name__} was replaced" for function, code in originals
                if function.__code__ is not code]

    def pytest_runtest_logstart(nodeid, location):
        phases_of[nodeid] = {}
        started_at[nodeid] = clock()
        send({"type": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(report):
        phases = phases_of.setdefault(report.nodeid, {})
        phases[report.when] = report
        if report.when != "teardown":
            return
        duration = clock() - started_at.pop(report.nodeid, clock())
        found = own_code_changed() + changes()
        send(verdict(report.nodeid, phases, duration, found))

    return types.SimpleNamespace(pytest_runtest_logstart=pytest_runtest_logstart,
                                 pytest_runtest_logreport=pytest_runtest_logreport)


def load_run_only(path: str | None) -> list[str] | None:
    """The node ids a restarted run must run, from the JSON file the grader wrote; None for all."""
    if not path:
        return None
    with open(path) as handle:
        return list(json.load(handle))

