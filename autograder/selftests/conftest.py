"""Shared fixtures of the kit's selftests: full grades that several test files read.

Grading takes time, so each full grade runs once per session, here, and every test that needs
it reads the same report: ``reference_grade`` (the bundled solution) and ``stub_grade`` (the
stub package students start from, as the student release holds it).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from autograder.release import build_release

KIT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def grades_dir():
    root = Path(tempfile.mkdtemp(prefix="kit-grades-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def reference_grade(grades_dir):
    """(GradeReport, results.json as written) for ``python -m autograder grade reference``."""
    out = grades_dir / "reference"
    report = grade(GradeOptions(submission=KIT / "reference", out=out, quiet=True))
    return report, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="session")
def student_release(grades_dir):
    """The student release tree, built once."""
    return build_release(grades_dir / "student")


@pytest.fixture(scope="session")
def stub_grade(grades_dir, student_release):
    """(GradeReport, results.json) for the release's stub package, graded as a submission zip
    made by its own make_submission.sh."""
    import subprocess
    import sys

    subprocess.run(["bash", "make_submission.sh", "--no-tests"], cwd=student_release, check=True,
                   capture_output=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    out = grades_dir / "stubs"
    report = grade(GradeOptions(submission=student_release / "submission.zip", out=out, quiet=True))
    return report, json.loads((out / "results.json").read_text())
