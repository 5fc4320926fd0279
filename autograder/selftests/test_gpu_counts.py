"""A runner with fewer GPUs than a test needs never costs that test's points; it says so instead.

Staff only. Part 2's NCCL tests need two GPUs (``@pytest.mark.gpu(count=2)``); many course
runners have one. On such a runner those tests are skipped, and the grader, the student's
``python -m tests.score`` and results.json must treat them as "not graded on this runner", as a
CPU runner treats every GPU test, never as failures. A test skipped for another reason still
earns nothing. A CPU machine cannot have one GPU, so this checks the pieces: the marker, the
verdict, the scorer and results.json, on made-up outcomes.
"""

from __future__ import annotations

import pytest

from autograder.manifest import load_manifest
from autograder.results import GradedTest, results_json
from autograder.runner import Verdict, _outcome
from tests.gpu_marker import SKIP_REASON, gpus_needed, skip_reason
from tests.score import Recorder

NODE = "tests/test_fsdp.py::test_fsdp_memory_on_two_gpus"


def _skipped(reason: str) -> dict:
    return {"nodeid": NODE, "outcome": "skipped", "message": reason, "duration": 0.0}


@pytest.mark.parametrize(("present", "needed"), [(0, 1), (0, 2), (1, 2)])
def test_too_few_gpus_is_not_graded(present, needed):
    verdict = _outcome(_skipped(skip_reason(needed, present)), needed, present)
    assert verdict.status == "not_graded", verdict
    assert (f"needs {needed} CUDA GPUs, and this grader has {present}" in verdict.message if present
            else "this grader has none" in verdict.message)


@pytest.mark.parametrize(("present", "needed"), [(1, 1), (2, 2), (1, 0), (0, 0)])
def test_any_other_skip_earns_nothing(present, needed):
    verdict = _outcome(_skipped("skipped by the submission"), needed, present)
    assert verdict.status == "failed" and "earns no points" in verdict.message


def test_skip_reasons_say_how_many_gpus():
    assert skip_reason(1, 0) == f"{SKIP_REASON} (none found on this machine)"
    assert skip_reason(2, 1) == f"{SKIP_REASON} per process: 2 GPUs (found 1 on this machine)"


class _Item:
    """A stand-in for a pytest item: just ``get_closest_marker``."""

    def __init__(self, marker=None):
        self.marker = marker

    def get_closest_marker(self, name):
        return self.marker.mark if self.marker is not None and name == "gpu" else None


def test_the_marker_counts():
    assert gpus_needed(_Item()) == 0
    assert gpus_needed(_Item(pytest.mark.gpu)) == 1
    assert gpus_needed(_Item(pytest.mark.gpu(count=2))) == 2


def test_the_students_scorer_does_not_fail_a_two_gpu_test_on_one_gpu():
    class Report:
        def __init__(self, when, outcome):
            self.nodeid, self.when = NODE, when
            self.failed, self.skipped, self.passed = outcome == "failed", outcome == "skipped", outcome == "passed"

    for present, expected in ((1, "not_graded"), (2, "failed")):
        recorder = Recorder(gpus=present)
        recorder.gpu = {NODE: 2}
        recorder.pytest_runtest_logreport(Report("setup", "skipped"))
        assert [o.status for o in recorder.outcomes()] == [expected]


def test_results_json_names_the_gpu_count_and_leaves_the_test_out():
    manifest = load_manifest()
    problem = manifest.by_name["fsdp"]
    test = GradedTest(problem, "visible", NODE, Verdict(NODE, "not_graded", "not graded on this runner", gpu=True),
                      max_score=1.0)
    results = results_json([test], manifest, execution_time=1.0, output="x", gpus_present=1)
    assert results["tests"] == [] and results["score"] == 0
    assert results["output"].startswith("This runner has 1 GPU, fewer than some tests need")
    assert results["extra_data"]["gpu_later_points"] == 1.0
    no_gpu = results_json([test], manifest, execution_time=1.0, output="x", gpus_present=0)
    assert no_gpu["output"].startswith("This runner has no GPU.")
