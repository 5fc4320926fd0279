"""Every fairness fixture (fixtures/fairness) gets the outcome its FIXTURE.toml states.

Staff only. Issue: grading real student FlashAttention-2 code fairly. Each fixture is graded
once on this machine (two test processes each, on its problems and -k filter only; two at a
time when this file runs alone, one at a time beside another file), and the checks read
results.json: the tests that must pass passed (a Triton kernel that crashes its process costs
no PyTorch test; an autotuned kernel is graded on the CPU), the tests that must fail failed (an
unrelated error of the right type, or a refusal after a kernel launch, earns no bad-input
credit; a float16 accumulator loses points), and tests that need a GPU stay "not graded on this
runner". What only a GPU can show is in each fixture's gpu_note. Part 2's fixtures are correct
variants (dividing before the all-reduce, ReduceOp.AVG, round-robin owners, reentrant
checkpointing) that must keep every point gradable here.
``CS336_FAIRNESS=name,name`` grades only those fixtures.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.fairness import FIXTURES
from autograder.grade import GradeOptions, grade
from autograder.selftests.conftest import side_by_side
from autograder.selftests.gradescope_schema import problems_with

NAMES = [fixture.name for fixture in FIXTURES]
ONLY = [name for name in os.environ.get("CS336_FAIRNESS", "").split(",") if name]
NOT_GRADED = "not graded on this runner"


@pytest.fixture(scope="module")
def fairness_grades():
    """{fixture name: (fixture, results.json)}, graded once per session."""
    root = Path(tempfile.mkdtemp(prefix="fairness-grades-"))
    root.chmod(0o755)

    def run(fixture):
        submission = materialize(fixture, root / fixture.name / "submission")
        out = root / fixture.name / "out"
        grade(GradeOptions(submission=submission, out=out, problems=list(fixture.verdict.problems),
                           keyword=fixture.verdict.keyword, quiet=True, jobs=2))
        return fixture.name, (fixture, json.loads((out / "results.json").read_text()))

    try:
        with ThreadPoolExecutor(max_workers=side_by_side()) as pool:  # as the attack selftest
            yield dict(pool.map(run, [fixture for fixture in FIXTURES if not ONLY or fixture.name in ONLY]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _entries(results: dict, problem: str) -> list[dict]:
    return [entry for entry in results["tests"] if f" {problem} [" in entry["name"]]


def test_a_long_failure_keeps_its_first_example():
    """Hypothesis puts its first falsifying example first; a cut report must keep it (and the end)."""
    from autograder.pytest_plugin import head_and_tail

    text = "Falsifying example: case=FlashCase(batch=1)\n" + "x" * 20_000 + "\nlast line"
    cut = head_and_tail(text, 8000)
    assert len(cut) < 8100 and cut.startswith("Falsifying example: case=FlashCase(batch=1)")
    assert cut.endswith("last line") and "characters left out" in cut


def test_the_catalog_covers_the_issue():
    assert {"triton_crashes", "autotuned_triton", "unrelated_errors", "checks_after_launch",
            "float16_accumulator_pytorch", "float16_accumulator_triton", "ddp_divides_in_the_hook", "ddp_reduce_op_avg",
            "sharded_round_robin_owners", "checkpoint_use_reentrant",
            "sharded_defaults_from_a_throwaway_instance", "ddp_future_callback_divides", "bucketed_other_planner",
            "fsdp_gathers_through_lists"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_gets_its_outcome(fairness_grades, name):
    if ONLY and name not in ONLY:
        pytest.skip(f"not among CS336_FAIRNESS={','.join(ONLY)}")
    fixture, results = fairness_grades[name]
    assert problems_with(results) == [], "results.json must stay valid"
    entries = [entry for problem in fixture.verdict.problems for entry in _entries(results, problem)]
    assert entries, f"no test of {fixture.verdict.problems} was graded"
    graded = [entry for entry in entries if not entry["output"].startswith(NOT_GRADED)]
    for pattern in fixture.verdict.must_pass:
        matched = [entry for entry in graded if fnmatch.fnmatchcase(entry["name"], pattern)]
        assert matched, f"{name}: no graded test matches must_pass {pattern!r}"
        failed = [(entry["name"], entry["output"][:400]) for entry in matched if entry["status"] != "passed"]
        assert not failed, f"{name}: tests that must pass failed: {failed}"
    for pattern in fixture.verdict.must_fail:
        matched = [entry for entry in graded if fnmatch.fnmatchcase(entry["name"], pattern)]
        assert matched, f"{name}: no graded test matches must_fail {pattern!r}"
        credited = [entry["name"] for entry in matched if entry["status"] == "passed" or entry["score"] > 0]
        assert not credited, f"{name}: tests that must fail earned points: {credited}"
    for problem in fixture.verdict.full_points + fixture.verdict.lose_points:
        mine = [entry for entry in _entries(results, problem) if not entry["output"].startswith(NOT_GRADED)]
        earned, gradable = sum(e["score"] for e in mine), sum(e["max_score"] for e in mine)
        if problem in fixture.verdict.full_points:
            assert earned >= gradable - 1e-3, f"{name}: {problem} earned {earned:.3f} of {gradable:.3f} gradable here"
        else:
            assert earned < gradable - 1e-3, f"{name}: {problem} lost no points ({earned:.3f} of {gradable:.3f})"
    gpu_only = [entry for entry in entries if entry["output"].startswith(NOT_GRADED)]
    assert all(entry["score"] == 0 and entry["max_score"] > 0 for entry in gpu_only), "GPU-only tests keep their points"
    outputs = "\n".join(entry["output"] for entry in graded if entry["status"] != "passed")
    for word in fixture.verdict.expect_output:
        assert word in outputs, f"{name}: no failing test's output mentions {word!r}:\n{outputs[:2000]}"
