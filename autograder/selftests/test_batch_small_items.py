"""Small things a TA meets running a class, each checked on its own (no grade runs here).

- scores.csv gives every submission where no test ran the same ``Ungraded Points``, 0: a GPU
  grades it no further (it read 0 for one such row and 13.63 for another);
- the histograms count graded work only (not the no-test rows, listed apart), and say when GPU
  points are missing from the totals;
- ``leaderboard batch --dry-run`` runs nothing, so it needs no GPU;
- ``pytest --submission /nonexistent`` says so in one line, not 22 lines of INTERNALERROR;
- pytest started in a subfolder (cs336_systems/) says where the tests are, not only "no tests ran".
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder.batch.report import class_report
from autograder.manifest import load_manifest
from autograder.selftests.fake_export import build_export
from harness import gpus

KIT = Path(__file__).resolve().parents[2]


def _results(score: float, gpu_later: float, no_test: str | None = None) -> dict:
    extra = {"problems": {"memory_profiling": {"score": score, "gpu_later": gpu_later}},
             "gpu_later_points": gpu_later}
    if no_test:
        extra["no_test_ran"] = no_test
    return {"score": score, "tests": [], "extra_data": extra}


def _submission(key: str) -> SimpleNamespace:
    return SimpleNamespace(id=key, label=key, students=())


def test_no_test_rows_all_get_0_ungraded_points_and_stay_out_of_the_histograms(tmp_path):
    graded = [
        (_submission("good"), _results(1.0, 2.0), "graded, but not 2.00 GPU points (see Ungraded Points)"),
        (_submission("corrupt"), _results(0.0, 0.0, "your zip is corrupt"), "no test ran: your zip is corrupt"),
        (_submission("empty"), _results(0.0, 13.63, "no adapters.py"), "no test ran: no adapters.py"),
    ]
    csv_path, markdown, _ = class_report(tmp_path, load_manifest(), graded, ["memory_profiling"],
                                         note="PARTIAL: GPU points missing")
    with csv_path.open(newline="") as handle:
        rows = {row["Submission"]: row["Ungraded Points"] for row in csv.DictReader(handle)}
    assert rows == {"good": "2", "corrupt": "0", "empty": "0"}, rows
    text = markdown.read_text()
    assert "1 graded submissions" in text and "PARTIAL: GPU points missing" in text, text


@pytest.mark.skipif(gpus.count() > 0, reason="checks the dry run on a machine without a GPU")
def test_a_leaderboard_dry_run_needs_no_gpu(tmp_path):
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934011"])
    result = subprocess.run([sys.executable, "-m", "leaderboard", "batch", str(export), "--out", str(tmp_path / "lb"),
                             "--dry-run"], cwd=KIT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert " -m leaderboard run " in result.stdout and not (tmp_path / "lb" / "runs").exists()


def test_a_missing_submission_folder_is_one_line_not_an_internal_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest", str(KIT / "tests" / "test_flash_forward_pytorch.py"),
                             "--submission", str(tmp_path / "nonexistent"), "-q", "-p", "no:xdist"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = (result.stdout + result.stderr).strip()
    assert "INTERNALERROR" not in output and "Traceback" not in output, output[-2000:]
    assert result.returncode == 4 and len(output.splitlines()) == 1 and "does not exist" in output, output


def test_pytest_started_in_a_subfolder_says_where_the_tests_are():
    """It collected nothing and said only "no tests ran"."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"],
                            cwd=KIT / "cs336_systems", capture_output=True, text=True, timeout=300)
    assert result.returncode == 5, result.stdout[-2000:]
    assert f"the tests are in {KIT / 'tests'}" in result.stdout and f"cd {KIT} && .venv/bin/pytest" in result.stdout
