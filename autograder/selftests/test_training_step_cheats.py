"""The §3.8 tests refuse the training-step board's cheats, handed in as students' submissions.

Staff only. Each fixture of fixtures/training_step is a whole submission; here it runs the
visible and hidden §3.8 tests in its own pytest process through the executor (``--isolate``,
as the grader runs them). The honest plain-DDP entry passes every test; each cheat fails the
hidden test of the detector its FIXTURE.toml names, and that test's message names the detector.
About 20 s on a 2-core CPU.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.training_step import FIXTURES, get

KIT = Path(__file__).resolve().parents[2]
FILES = ("tests/test_training_step.py", "autograder/hidden_tests/test_training_step_hidden.py")
TEST_OF_DETECTOR = {
    "different_model": "test_training_step_trains_the_provided_model",
    "no_update": "test_training_step_updates_the_parameters",
    "no_communication": "test_training_step_communicates_every_step",
    "work_skipped_when_timed": "test_training_step_still_trains_when_timed",
}


def run_tests(submission: Path, tests: list[str], report: Path) -> dict[str, str]:
    """{test name: "" if passed, else its failure message} of ``tests`` (node ids) on ``submission``."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--isolate",
               "--submission", str(submission), f"--junitxml={report}", *tests]
    done = subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=300)
    assert report.exists(), f"pytest wrote no report; its output:\n{(done.stdout + done.stderr)[-3000:]}"
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        failure = case.find("failure")
        failure = failure if failure is not None else case.find("error")
        outcomes[case.get("name")] = "" if failure is None else (failure.get("message") or "failed")
    return outcomes


def test_the_detectors_are_the_hidden_tests():
    from harness.training_step import DETECTORS

    assert set(TEST_OF_DETECTOR) == set(DETECTORS) - {"gate"}
    assert {get(f.name).verdict.refused_by for f in FIXTURES} - {""} == set(TEST_OF_DETECTOR)


@pytest.mark.parametrize("fixture", [f.name for f in FIXTURES])
def test_each_fixture_gets_its_verdict_as_a_student_submission(fixture, tmp_path):
    detector = get(fixture).verdict.refused_by
    submission = materialize(get(fixture), tmp_path / fixture)
    if not detector:
        outcomes = run_tests(submission, list(FILES), tmp_path / "report.xml")
        assert len(outcomes) == 6 and not any(outcomes.values()), f"{fixture} must pass every §3.8 test: {outcomes}"
        return
    test = TEST_OF_DETECTOR[detector]
    outcomes = run_tests(submission, [f"{FILES[1]}::{test}"], tmp_path / "report.xml")
    assert outcomes.get(test), f"{fixture} must fail {test} (the {detector} rule); outcomes: {outcomes}"
    assert detector in outcomes[test], f"{test}'s message must name {detector}: {outcomes[test]}"
