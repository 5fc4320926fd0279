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


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Plain ``pytest`` in the kit: ``-n 2 --dist loadfile`` when pytest-xdist is there and nothing
    else was asked (runs before xdist's own hook, which reads these options)."""
    if (config.args_source is pytest.Config.ArgsSource.TESTPATHS and config.pluginmanager.hasplugin("xdist")
            and config.option.numprocesses is None and config.option.dist == "no"
            and not hasattr(config, "workerinput")):
        config.option.numprocesses = WORKERS
        config.option.dist = "loadfile"


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
