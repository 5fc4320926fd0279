"""Shared fixtures of the kit's selftests: full grades that several test files read; and how a
plain ``pytest`` in the kit spreads them over two processes.

Grading takes time, so each full grade runs once per session, here, and every test that needs
it reads the same report: ``reference_grade`` (the bundled solution) and ``stub_grade`` (the
stub package students start from, as the student release holds it).

Plain ``.venv/bin/pytest`` (the README's second command, no paths given) runs two test files at
a time with pytest-xdist (``-n 2 --dist loadfile``): one at a time, the selftests often leave a
core of a 2-core machine idle (waiting on Slurm, on hangs, on timeouts), and two at a time took
1,135 s where one at a time took 1,293 s (2026-12-02, 2 cores, the same tree). Each file runs
whole in one process, so its module fixtures grade once; the reference and the stubs are graded
once, by the first process that needs them (``_once_per_run``). Naming paths, or ``-n``, or
``-p no:xdist``, runs as asked; without pytest-xdist installed everything runs in one process.
(``--dist loadgroup`` could keep the files that share a grade in one process instead, but xdist
3.8 cannot group tests under pytest 9, whose test ids no longer read the attribute xdist rewrites.)

The files go out heaviest first (``HEAVIEST_FIRST``, then the rest in collection order), so that
the last files the two processes run are short and neither waits long for the other at the end.
xdist's own order (files with the most tests first) left the few-test files that grade whole
submissions (the contract's two full runs, the Gradescope emulation) for the end of the run.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from autograder.release import build_release

KIT = Path(__file__).resolve().parents[2]
WORKERS = 2
# The files of a plain run that cost the most, most first: about that many seconds of CPU on a
# 2-core machine (2026-12-04). test_grader_submissions.py counts the reference's and the stubs'
# session grades and goes early, so that they are made before the other files that read them;
# test_batch_real_slurm.py mostly waits on Slurm, which is best done beside a busy file.
HEAVIEST_FIRST = (
    "autograder/selftests/test_grader_attacks.py",  # 330
    "autograder/selftests/test_grader_fairness.py",  # 200
    "autograder/selftests/test_grader_submissions.py",  # 120
    "autograder/selftests/test_gradescope_emulation.py",  # 145
    "autograder/selftests/test_student_messages.py",  # 155 (5 grades; 2026-12-06)
    "autograder/selftests/test_failure_cost.py",  # 135
    "autograder/selftests/test_distributed_mutants.py",  # 125
    "autograder/selftests/test_submission_contract.py",  # 100
    "autograder/selftests/test_batch.py",  # 75
    "autograder/selftests/test_batch_real_slurm.py",  # 60 s on the clock, most of it waiting
    "autograder/selftests/test_same_grade.py",  # 65
    "autograder/selftests/test_grader_watchdog.py",  # 55
    "autograder/selftests/test_autotune_modes.py",  # 55
    "autograder/selftests/test_release.py",  # 45
    "autograder/selftests/test_charge_order.py",  # 35 (2026-12-06)
    "autograder/selftests/test_replay_tolerance.py",  # 25 (2 grades; 2026-12-06)
    "autograder/selftests/test_mutant_catalog.py",  # 40
    "autograder/selftests/test_no_triton.py",  # 35
    "leaderboard/tests/test_training_step_cpu.py",  # 30
    "autograder/selftests/test_grader_schedule.py",  # 30
    "autograder/selftests/test_gpu_quiet.py",  # 25
    "leaderboard/tests/test_attacks_cpu.py",  # 20
)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Plain ``pytest`` in the kit: ``-n 2 --dist loadfile``, files in collection order, when
    pytest-xdist is there and nothing else was asked (runs before xdist's own hook, which reads
    these options)."""
    if (config.args_source is pytest.Config.ArgsSource.TESTPATHS and config.pluginmanager.hasplugin("xdist")
            and config.option.numprocesses is None and config.option.dist == "no"
            and not hasattr(config, "workerinput")):
        config.option.numprocesses = WORKERS
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # files go out in the order pytest_collection_modifyitems gives


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller, for each worker it starts: a run that hands out files in collection
    order (plain ``pytest``) tells its workers to collect the heaviest first. (Workers parse the
    command line afresh, so they never see the options ``pytest_cmdline_main`` set.)"""
    node.workerinput["heaviest_first"] = node.config.option.loadscopereorder is False


def pytest_collection_modifyitems(config, items):
    """In xdist's workers of a run that hands out files in collection order (plain ``pytest``):
    the files of ``HEAVIEST_FIRST`` first, in that order, then the rest as collected."""
    if not getattr(config, "workerinput", {}).get("heaviest_first"):
        return
    rank = {path: index for index, path in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order


def side_by_side() -> int:
    """How many grades (or pytest jobs) a selftest fixture runs at a time: two when its file runs
    alone, one in an xdist worker, where the other worker's file keeps the second core busy. Two
    at a time beside another file cost more CPU than their overlap saved: the attack and fairness
    files took 707 s of CPU (355 s) with two grades each at a time, 613 s (339 s) with one
    (2026-12-04, 2 cores, ``-n 2``)."""
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


def _once_per_run(tmp_path_factory, name: str, make):
    """``make()``, once per run even when xdist's workers each ask: the first to ask runs it under
    a lock in the run's shared temporary folder and leaves its value there as a pickle, and the
    others wait on the lock and read that. Outside xdist, ``make()``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make()
    shared = tmp_path_factory.getbasetemp().parent  # the run's folder; each worker's is inside it
    with open(shared / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        done = shared / f"{name}.pickle"
        if done.exists():
            return pickle.loads(done.read_bytes())
        value = make()
        done.write_bytes(pickle.dumps(value))
        return value


def _grade_and_read(submission: Path, out: Path):
    """(GradeReport, results.json as written) for a grade of ``submission`` into ``out``."""
    report = grade(GradeOptions(submission=submission, out=out, quiet=True))
    return report, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="session")
def grades_dir():
    root = Path(tempfile.mkdtemp(prefix="kit-grades-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def reference_grade(grades_dir, tmp_path_factory):
    """(GradeReport, results.json as written) for ``python -m autograder grade reference``."""
    return _once_per_run(tmp_path_factory, "reference_grade",
                         lambda: _grade_and_read(KIT / "reference", grades_dir / "reference"))


@pytest.fixture(scope="session")
def student_release(grades_dir):
    """The student release tree, built once."""
    return build_release(grades_dir / "student")


@pytest.fixture(scope="session")
def stub_grade(grades_dir, student_release, tmp_path_factory):
    """(GradeReport, results.json) for the release's stub package, graded as a submission zip
    made by its own make_submission.sh (made in every process: tests read this process's zip)."""
    subprocess.run(["bash", "make_submission.sh", "--no-tests"], cwd=student_release, check=True,
                   capture_output=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    return _once_per_run(tmp_path_factory, "stub_grade",
                         lambda: _grade_and_read(student_release / "submission.zip", grades_dir / "stubs"))


def tiny_submission(root: Path, files: dict[str, str]) -> Path:
    """A submission folder at ``root``: ``files`` (relative path -> text) and an empty package."""
    (root / "cs336_systems").mkdir(parents=True)
    (root / "cs336_systems" / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


@pytest.fixture
def interpreted_adapters(tmp_path, monkeypatch):
    """Call it with a tiny submission's ``files``: that submission's adapters, served by an executor
    under Triton's interpreter (stopped after the test)."""
    from harness.client import Executor
    from harness.process import ExecutorSettings
    from harness.proxies import RemoteAdapters

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    executors = []

    def serve(files: dict[str, str]):
        settings = ExecutorSettings(submission=tiny_submission(tmp_path / "submission", files),
                                    workdir=tmp_path / "work", test_timeout_s=120.0)
        executors.append(Executor(settings))
        executors[-1].begin_test()
        return RemoteAdapters(executors[-1])

    yield serve
    for executor in executors:
        executor.stop()
