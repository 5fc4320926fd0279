"""Short failures for stubs that are not implemented yet: one line each, grouped at the end.

Registered by conftest.py as a pytest plugin. Every stub raises a NotImplementedError whose
message names its file, its function and its handout section (cs336_systems/_not_implemented.py).
A test that reaches one:

- fails with that one line instead of a traceback that reprints the stub's docstring;
- if it is a Hypothesis test, stops at its first example: every input would raise the same
  error, so shrinking it (and rerunning the work done before the stub, such as an interpreted
  Triton forward before a stubbed backward) only costs time;
- shows as ``N`` in the progress line and as "not implemented" in the final counts, and the
  stubs it reached are listed once each under "not implemented yet", in handout order.

The same wrapper ends a Hypothesis test at the example during which the submission's process
crashed or ran out of time (``ExecutorFailure``): every later example would fail at once ("not
run: ... earlier in this test"), and Hypothesis would shrink to the smallest of them, a case the
code may well get right. The failure names the example that was running, with its rerun command.

The test still fails: pytest exits with status 1 and the grader scores it 0. Under
``--isolate`` the error comes back from the submission's process as a built-in
NotImplementedError with the same message, and is shortened the same way.
"""

from __future__ import annotations

import functools
import re

import pytest

__tracebackhide__ = True  # pytest leaves this module's frames out of a failure's traceback: plumbing, not the test

CATEGORY = "not implemented"  # the word in pytest's final counts
STUB_MESSAGE = re.compile(
    r"(?P<file>cs336_systems/\S+\.py): (?P<function>\S+) is not implemented yet\."
    r".*\(see handout/README\.md, (?P<section>§[^)]*)\)"
)
_PREFIX = "NotImplementedError: "


class ExampleEndedRun(BaseException):
    """Carries the ExecutorFailure of one example (a crash or a timeout) out of a Hypothesis
    test without shrinking: the test fails with that example's own failure."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class StubReached(BaseException):
    """Carries a stub's NotImplementedError out of a Hypothesis test without being shrunk.

    A BaseException that is not an Exception: Hypothesis treats only Exception (and pytest's
    fail) as a failing example to shrink, and lets anything else end the run at once.
    """

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def stub_error(error: BaseException | None) -> BaseException | None:
    """The stub's NotImplementedError behind ``error`` (its causes and groups included), or None."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, StubReached):
            return current.error
        if isinstance(current, NotImplementedError) and STUB_MESSAGE.search(str(current)):
            return current
        pending += [current.__cause__, current.__context__, *getattr(current, "exceptions", ())]
    return None


def _executor_failure(error: BaseException) -> bool:
    try:
        from harness.process import ExecutorFailure
    except ImportError:  # a kit without the executor
        return False
    return isinstance(error, ExecutorFailure)


def _stop_at_stub(inner_test):
    @functools.wraps(inner_test)
    def wrapped(*args, **kwargs):
        try:
            return inner_test(*args, **kwargs)
        except Exception as error:
            found = stub_error(error)
            if found is not None:
                raise StubReached(found) from None
            if _executor_failure(error):
                raise ExampleEndedRun(error) from None
            raise

    wrapped._stops_at_stub = True
    return wrapped


def pytest_collection_modifyitems(items):
    for item in items:
        handle = getattr(getattr(item, "obj", None), "hypothesis", None)
        inner = getattr(handle, "inner_test", None)
        if inner is not None and not getattr(inner, "_stops_at_stub", False):
            handle.inner_test = _stop_at_stub(inner)  # Hypothesis's documented hook for wrapping


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    try:
        return (yield)
    except StubReached as reached:
        raise reached.error from None  # the test fails with the stub's own error
    except ExampleEndedRun as ended:
        raise ended.error from None  # the example that crashed or timed out, not a shrunk one


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and call.excinfo is not None:
        found = stub_error(call.excinfo.value)
        if found is not None:
            report.longrepr = _PREFIX + str(found).splitlines()[0]
    return report


def _stub_of(report) -> re.Match | None:
    longrepr = report.longrepr
    if report.failed and isinstance(longrepr, str) and longrepr.startswith(_PREFIX):
        return STUB_MESSAGE.search(longrepr)
    return None


def pytest_report_teststatus(report, config):
    if _stub_of(report) is not None:
        return CATEGORY, "N", ("NOT IMPLEMENTED", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter):
    reports = [report for report in terminalreporter.stats.get(CATEGORY, ()) if _stub_of(report)]
    if not reports:
        return
    stubs: dict[tuple[str, str, str], int] = {}
    for report in reports:
        match = _stub_of(report)
        key = (match["section"], match["file"], match["function"])
        stubs[key] = stubs.get(key, 0) + 1
    terminalreporter.section("not implemented yet", sep="=", yellow=True)
    width = max(len(section) for section, _, _ in stubs)
    in_handout_order = sorted(stubs.items(), key=lambda item: [int(n) for n in re.findall(r"\d+", item[0][0])])
    for (section, file, function), count in in_handout_order:
        tests = "test" if count == 1 else "tests"
        terminalreporter.write_line(f"{section:<{width}}  {file}: {function}  ({count} {tests})")
    terminalreporter.write_line(
        f"{len(reports)} tests fail only because they reach these stubs: implement each as its "
        "docstring says (handout/README.md has the section)."
    )
