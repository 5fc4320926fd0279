"""Pytest harness for the visible tests (tests/) and the grader's hidden tests.

Chooses the submission under test: ``--submission DIR``, else ``$CS336_SUBMISSION``, else this
directory (the student's own checkout). Tests get the submission's adapters through the
``adapters`` fixture. Tests marked ``gpu`` are skipped when no CUDA GPU is present, and Triton
kernels run under the interpreter (TRITON_INTERPRET=1) when it is absent. Tests marked
``triton`` are skipped where Triton is not installed (macOS, Windows), with one note at the end
of the run that says where to run them (harness/triton_marker.py).

With ``--isolate`` (the grader always passes it) the submission runs in a separate process,
the executor (executor/), and ``adapters`` is a stand-in that calls into it: the tests,
their assertions and their verdicts stay in this process, where submitted code cannot reach.
Without it the submission is imported here, which is simpler to debug.

The submission's ``@triton.autotune`` tunes for real only in a test marked ``timing``
(executor/autotune.py). Every other test of the submission runs once per config of its
autotuners, config 0 first, without benchmarking (harness/autotune_configs.py): which config
wins the timing is noise, so every config must be right. ``CS336_AUTOTUNE=full`` makes every test
tune for real instead, as a grade without that speed-up would.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from harness import gpus

# Must be set before triton is first imported by any test or submission module.
if not gpus.count():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from harness.gpu_marker import gpus_needed, skip_reason  # noqa: E402
from harness.submission import SubmissionError, load_adapters, resolve_submission_dir  # noqa: E402
from harness.triton_marker import HOW_TO_RUN, SKIP_REASON as NO_TRITON, needs_triton, triton_importable  # noqa: E402

ROOT = Path(__file__).resolve().parent
# A stub's NotImplementedError fails its test in one line, and a Hypothesis test at its first example;
# every test's random examples derive from the course's secret and its node id (harness/example_seeds.py).
# Every test of the submission but a timing test runs once per autotune config (harness/autotune_configs.py).
pytest_plugins = ("harness.stub_failures", "harness.example_seeds", "harness.autotune_configs")


def pytest_addoption(parser):
    parser.addoption(
        "--submission",
        default=None,
        help="directory holding adapters.py and cs336_systems/ to test "
        "(default: $CS336_SUBMISSION, else the directory of this conftest.py)",
    )
    group = parser.getgroup("executor", "running the submission in its own process (as the grader does)")
    group.addoption("--isolate", action="store_true",
                    help="run the submission in a separate process, the executor, which the tests reach only "
                    "through a narrow protocol (the grader always does, and as root also gives it a user id of "
                    "its own with --executor-uid)")
    group.addoption("--executor-dir", default=None, help="folder for the executor's files (default: a temp folder)")
    group.addoption("--executor-uid", type=int, default=None, help="user id the executor runs as (needs root)")
    group.addoption("--executor-gid", type=int, default=None, help="group id the executor runs as (needs root)")
    group.addoption("--replay-uid", type=int, default=None,
                    help="user id the replay of Triton kernels runs as (needs root; default: the executor's)")
    group.addoption("--replay-cache", type=Path, default=None,
                    help="a Triton cache folder the replays share, owned by --replay-uid (default: one per replay)")
    group.addoption("--executor-limits", default="{}", help="JSON resource limits for the executor")
    group.addoption("--executor-timeout", type=float, default=None, help="seconds one test may wait on the executor")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu(count=1): needs `count` CUDA GPUs; skipped when fewer are present")
    config.addinivalue_line("markers", "triton: runs Triton kernels; skipped where Triton is not installed")
    config.addinivalue_line("markers", "timing: the verdict reads timings, so the submission's autotuners "
                            "benchmark every config (other tests keep the first config that launches)")
    config.addinivalue_line("markers", "alone_on_gpu: the verdict compares or bounds GPU timings, so when a grade "
                            "runs tests side by side on a GPU, no other test runs while this one does")
    # Triton's interpreter turns one-element arrays into scalars, which NumPy >= 1.25 warns about
    # hundreds of times a run: silence that warning only, and only from the interpreter.
    config.addinivalue_line("filterwarnings", "ignore:Conversion of an array with ndim > 0 to a scalar"
                            ":DeprecationWarning:triton.runtime.interpreter")
    try:
        config.submission_dir = resolve_submission_dir(config.getoption("--submission"), ROOT)
    except SubmissionError as error:  # one line (pytest's "ERROR: ..."), not an INTERNALERROR traceback
        raise pytest.UsageError(str(error)) from None
    config.executor = None
    config.triton_skipped = 0
    if not config.getoption("--isolate") and triton_importable():
        from executor import autotune, interpreter_memory

        # The submission is imported in this process: its autotuners tune for real on a GPU, keep
        # one config under the interpreter, and run config n in a test that checks each of them.
        autotune.install(interpreter=os.environ.get("TRITON_INTERPRET") == "1")
        interpreter_memory.install_if_interpreted()  # a kernel's stray access fails its test, not later ones
    if config.getoption("--isolate"):
        from harness.client import Executor
        from harness.process import ExecutorSettings

        workdir = config.getoption("--executor-dir") or tempfile.mkdtemp(prefix="cs336-executor-")
        config.executor = Executor(ExecutorSettings(
            submission=config.submission_dir, workdir=Path(workdir), uid=config.getoption("--executor-uid"),
            gid=config.getoption("--executor-gid"), limits=json.loads(config.getoption("--executor-limits")),
            replay_uid=config.getoption("--replay-uid"), replay_cache=config.getoption("--replay-cache"),
            test_timeout_s=config.getoption("--executor-timeout"),
        ))
        if not config.option.collectonly:
            config.executor.start(wait=False)  # it imports torch while pytest collects the tests


def pytest_report_header(config):
    where = "in a separate executor process" if config.executor else "in this process"
    return f"submission under test: {config.submission_dir} (run {where})"


def pytest_collection_modifyitems(config, items):
    if config.executor is not None and items:
        config.executor.start()  # waits for its greeting, outside every test's time limit
    present = gpus.count()
    for item in items:
        needed = gpus_needed(item)
        if needed > present:
            item.add_marker(pytest.mark.skip(reason=skip_reason(needed, present)))
        elif needs_triton(item) and not triton_importable():
            item.add_marker(pytest.mark.skip(reason=NO_TRITON))
            config.triton_skipped += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2].endswith(NO_TRITON):
        # One line in pytest's skip summary for all of them, pointing at the note that explains them.
        report.longrepr = (str(ROOT / "tests" / "harness" / "triton_marker.py"), None, report.longrepr[2])
    return report


def pytest_collection_finish(session):
    session.config.collected_items = len(session.items) + getattr(
        session.config, "deselected_items", 0)


def pytest_deselected(items):
    if items:
        config = items[0].config
        config.deselected_items = getattr(config, "deselected_items", 0) + len(items)


def pytest_terminal_summary(terminalreporter, config):
    here = Path(config.invocation_params.dir).resolve()
    nothing = not getattr(config, "collected_items", 0)
    if nothing and config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR and here != ROOT:
        # pytest started in a subfolder (cs336_systems/, say) collects only that folder: nothing
        terminalreporter.line(f"no tests in {here}: the tests are in {ROOT / 'tests'}; run pytest from the "
                              f"assignment's folder: cd {ROOT} && .venv/bin/pytest", yellow=True, bold=True)
    if getattr(config, "triton_skipped", 0):
        terminalreporter.section("Triton tests skipped", sep="=", yellow=True)
        terminalreporter.line(HOW_TO_RUN.format(count=config.triton_skipped))


def pytest_unconfigure(config):
    if getattr(config, "executor", None) is not None:
        config.executor.close()


@pytest.fixture(scope="session")
def submission_dir(pytestconfig) -> Path:
    """The directory of the submission under test."""
    return pytestconfig.submission_dir


@pytest.fixture(scope="session")
def adapters(pytestconfig, submission_dir):
    """The submission's ``adapters``: the only way tests reach student code (a stand-in under --isolate)."""
    if pytestconfig.executor is not None:
        from harness.proxies import RemoteAdapters

        return RemoteAdapters(pytestconfig.executor)
    return load_adapters(submission_dir)


@pytest.fixture
def each_autotune_config(pytestconfig):
    """Runs a check once per config of the submission's autotuners (harness/autotune_configs.py)."""
    from harness.autotune_configs import EachAutotuneConfig

    return EachAutotuneConfig(pytestconfig.executor)


@pytest.fixture(autouse=True)
def _executor_budget(pytestconfig, request):
    """Under --isolate: each test gets its own time budget and a fresh start after a crash."""
    executor = pytestconfig.executor
    if executor is not None:
        from harness.autotune_configs import AUTOTUNE_ENV

        timing = request.node.get_closest_marker("timing") is not None
        executor.begin_test(timing=timing, tune=os.environ.get(AUTOTUNE_ENV) == "full")
    yield
    if executor is not None:
        executor.end_test()
