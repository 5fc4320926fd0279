"""Grading the reference gives every point; the stubs give none and say what to implement;
a FlashAttention mutant loses points on each problem it breaks."""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.fairness import FIXTURES as FAIRNESS
from fixtures.mutants import MUTANTS
from autograder.grade import GradeOptions, grade
from autograder.manifest import load_manifest
from autograder.selftests.gradescope_schema import hidden_shown_early, problems_with
from harness import gpus

MANIFEST = load_manifest()


def _problem(entry: dict) -> str:
    return entry["name"].split(" ")[1]


# -- the reference --------------------------------------------------------------------------


def test_reference_results_json_is_valid(reference_grade):
    assert problems_with(reference_grade[1]) == []


def test_reference_earns_every_gradable_point(reference_grade):
    report, results = reference_grade
    lost = [(e["name"], e["output"][:500]) for e in results["tests"] if e["status"] != "passed"]
    assert not lost, f"the reference must pass every test this runner can grade; it failed {len(lost)}: {lost[:5]}"
    if gpus.count():
        assert abs(results["score"] - MANIFEST.total_points) < 1e-3


def test_reference_grade_covers_every_problem_and_point(reference_grade):
    results = reference_grade[1]
    problems = results["extra_data"]["problems"]
    graded = {_problem(entry) for entry in results["tests"]} | {n for n, p in problems.items() if p["gpu_later"] > 0}
    wanted = {problem.name for problem in MANIFEST.problems if problem.points > 0}
    assert wanted <= graded, f"problems without a graded test: {sorted(wanted - graded)}"
    here = sum(e["max_score"] for e in results["tests"])
    assert abs(here + results["extra_data"]["gpu_later_points"] - MANIFEST.total_points) < 1e-2
    for name, points in problems.items():
        mine = [e for e in results["tests"] if _problem(e) == name]
        assert abs(sum(e["score"] for e in mine) - points["score"]) < 1e-3, name
        assert abs(points["max_score"] + points["gpu_later"] - MANIFEST.by_name[name].points) < 1e-2, name


def test_reference_grade_reports_its_time_and_table(reference_grade):
    report, results = reference_grade
    assert report.seconds < 600, f"grading the reference took {report.seconds:.0f} s; the budget is 10 minutes"
    assert "total" in report.table and "Graded on a" in results["output"]
    for problem in MANIFEST.problems:
        if problem.points:
            assert problem.name in report.table


def test_gpu_only_tests_are_not_failures_on_cpu(reference_grade):
    """On a runner without a GPU, GPU-only tests are left out of results.json's tests and score;
    the output says which problems and how many points a GPU grade adds."""
    results = reference_grade[1]
    assert not [e["name"] for e in results["tests"] if e["status"] == "failed"]
    assert abs(results["score"] - sum(e["score"] for e in results["tests"])) < 1e-3
    later = results["extra_data"]["gpu_later_points"]
    if gpus.count():
        assert later == 0 and "This runner has no GPU" not in results["output"]
    else:
        assert later > 0
        first = results["output"].splitlines()[0]
        assert first.startswith("This runner has no GPU.") and f"{later:.2f} points" in first
        for name, points in results["extra_data"]["problems"].items():
            if points["gpu_later"] > 0:
                assert f" {name} (" in first, (name, first)


def test_hidden_tests_show_only_after_publication(reference_grade):
    results = reference_grade[1]
    hidden = [e for e in results["tests"] if "[hidden]" in e["name"]]
    assert hidden and {e["visibility"] for e in hidden} == {MANIFEST.settings.hidden_visibility}
    assert MANIFEST.settings.hidden_visibility == "after_published" and hidden_shown_early(results) == []
    assert all(e["visibility"] == "visible" for e in results["tests"] if "[visible]" in e["name"])
    assert f"{len(hidden)} hidden tests (" in results["output"]
    assert "their names and results show once grades are published" in results["output"]
    assert results["extra_data"]["hidden_tests"] == len(hidden)


# -- the stubs ------------------------------------------------------------------------------


def test_stub_package_scores_zero(stub_grade):
    report, results = stub_grade
    assert problems_with(results) == []
    assert results["score"] == 0, [e["name"] for e in results["tests"] if e["score"] > 0]
    graded = {_problem(entry) for entry in results["tests"]}
    assert {p.name for p in MANIFEST.problems if p.points > 0} <= graded, "the stub grade must grade every problem"


def reference_grade_names(results: dict) -> list[str]:
    return [entry["name"] for entry in results["tests"]]


def test_every_stub_failure_names_what_to_implement(stub_grade):
    results = stub_grade[1]
    vague = []
    for entry in results["tests"]:
        output = entry["output"]
        if not ("is not implemented yet" in output and "cs336_systems/" in output and "§" in output):
            vague.append((entry["name"], output[:300]))
    assert not vague, f"{len(vague)} stub failures do not name the file, function and handout section: {vague[:5]}"


def test_stub_grade_matches_reference_grade_test_for_test(stub_grade, reference_grade):
    stubs = sorted(reference_grade_names(stub_grade[1]))
    reference = sorted(reference_grade_names(reference_grade[1]))
    assert stubs == reference


# -- the mutants ----------------------------------------------------------------------------

GRADABLE = [m for m in MUTANTS if not m.verdict.gpu_only or gpus.count()]
# test_grader_fairness.py grades two of these mutants end to end already, as fairness fixtures
# built on them (float16_accumulator_pytorch and _triton), and checks that they lose points on
# their problems: those problems' scoring paths are covered there.
LOST_IN_FAIRNESS = {problem for fixture in FAIRNESS if fixture.base.startswith("fixtures/mutants/")
                    for problem in fixture.verdict.lose_points}
# Every mutant's tests are shown to fail by test_mutant_catalog.py; here the grader turns failures
# into lost points, which does not depend on the mistake: one mutant per problem it breaks (the
# first in the catalog) is graded end to end, so each problem's scoring path is covered once,
# here or in test_grader_fairness.py.
GRADABLE_MUTANTS = [m for m in GRADABLE
                    if any(next(g for g in GRADABLE if problem in g.verdict.breaks) is m
                           for problem in m.verdict.breaks if problem not in LOST_IN_FAIRNESS)]


@pytest.fixture(scope="module")
def mutant_grades():
    """{mutant name: results} for each mutant graded on the hidden tests that must catch it."""
    root = Path(tempfile.mkdtemp(prefix="mutant-grades-"))
    root.chmod(0o755)

    def run(mutant):
        submission = materialize(mutant, root / mutant.name)
        report = grade(GradeOptions(submission=submission, out=None, tests=list(mutant.verdict.caught_by), quiet=True))
        return mutant.name, report.results

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            yield dict(pool.map(run, GRADABLE_MUTANTS))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_every_problem_a_mutant_breaks_loses_points_in_some_grade():
    """Each problem that a gradable mutant breaks is graded end to end on one: here, or as a
    fairness fixture built on a mutant of this catalog that breaks it and must lose points on it."""
    by_name = {mutant.name: mutant for mutant in MUTANTS}
    for fixture in FAIRNESS:
        if fixture.base.startswith("fixtures/mutants/"):
            mutant = by_name.get(fixture.base.rsplit("/", 1)[1])
            assert mutant and set(fixture.verdict.lose_points) <= set(mutant.verdict.breaks), (
                f"{fixture.name}: its base {fixture.base} must be a mutant that breaks {fixture.verdict.lose_points}")
    broken = {problem for mutant in GRADABLE for problem in mutant.verdict.breaks}
    graded = {problem for mutant in GRADABLE_MUTANTS for problem in mutant.verdict.breaks}
    assert broken <= graded | LOST_IN_FAIRNESS, sorted(broken - graded - LOST_IN_FAIRNESS)


@pytest.mark.parametrize("mutant", GRADABLE_MUTANTS, ids=[m.name for m in GRADABLE_MUTANTS])
def test_mutant_loses_points_on_the_problems_it_breaks(mutant_grades, mutant):
    results = mutant_grades[mutant.name]
    assert problems_with(results) == []
    for problem in mutant.verdict.breaks:
        entries = [e for e in results["tests"] if _problem(e) == problem]
        earned, possible = sum(e["score"] for e in entries), sum(e["max_score"] for e in entries)
        assert entries and earned < possible, f"{mutant.name} ({mutant.summary}) must lose points on {problem}"
