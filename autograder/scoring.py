"""Points: how a problem's points are shared among its tests, and what each test earned.

Read by ``grade.py`` (which scores every grade with it), by ``student_points.py`` (which gives
students the same arithmetic for ``python -m tests.score``) and by staff changing how points are
shared. A problem's points (from the manifest) are shared among all its tests, visible and
hidden, by weight, in the 1e-4 steps results.json shows, so that the shares add up to exactly
the problem's points; only a passed test earns its share. A test that needs more GPUs than the
runner has is ``not_graded``: its share counts under "needs GPU", never as a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from autograder.manifest import Manifest, Problem
from autograder.watchdog import SuiteRun, Verdict


@dataclass
class GradedTest:
    """One entry of results.json's ``tests``."""

    problem: Problem
    suite: str
    nodeid: str
    outcome: Verdict
    weight: float = 1.0
    max_score: float = 0.0

    @property
    def key(self) -> str:
        path, _, name = self.nodeid.partition("::")
        return f"{Path(path).name}::{name}" if name else Path(path).name

    @property
    def score(self) -> float:
        return self.max_score if self.outcome.status == "passed" else 0.0


def _file_of(nodeid: str) -> str:
    return Path(nodeid.split("::", 1)[0]).name


def collect_tests(manifest: Manifest, runs: list[SuiteRun], problems: list[Problem], complete: bool) -> list[GradedTest]:
    """All graded tests, with their share of their problem's points.

    Collection errors and suites that never started become failing tests of their files'
    problems. With ``complete`` (no -k/--problems filter), a problem that has points but no
    test at all gets one failing entry, so that its points are never silently dropped.
    """
    selected = {problem.name for problem in problems}
    tests: list[GradedTest] = []

    def add(suite: str, nodeid: str, outcome: Verdict) -> None:
        problem = manifest.problem_of_file(_file_of(nodeid))
        if problem is None or problem.name not in selected:
            return
        tests.append(GradedTest(problem, suite, nodeid, outcome))

    for run in runs:
        for nodeid, outcome in run.outcomes.items():
            add(run.name, nodeid, outcome)
        for nodeid, message in run.collect_errors:
            add(run.name, f"{nodeid}::<collection>", Verdict(
                f"{nodeid}::<collection>", "failed",
                "this test file failed to import in the grader (a kit error, not yours):\n" + message[-2000:]))
        if run.startup_failure is not None:
            for path in run.files:
                nodeid = f"{path}::<startup>"
                add(run.name, nodeid, Verdict(
                    nodeid, "failed", "the test process failed before running any test:\n" + run.startup_failure))
    if complete:
        have = {test.problem.name for test in tests}
        for problem in problems:
            if problem.points > 0 and problem.name not in have:
                nodeid = f"test_{problem.name}.py::<no tests>"
                tests.append(GradedTest(problem, "visible", nodeid, Verdict(
                    nodeid, "failed", f"the kit has no tests for {problem.name} (a kit error, not yours)")))
    for problem in problems:
        mine = [test for test in tests if test.problem.name == problem.name]
        for test in mine:
            test.weight = problem.weight_of(test.key)
        _apportion(mine, problem.points)
    order = {problem.name: index for index, problem in enumerate(manifest.problems)}
    tests.sort(key=lambda test: (order[test.problem.name], test.suite != "visible"))
    return tests


def _apportion(tests: list[GradedTest], points: float) -> None:
    """Share ``points`` among ``tests`` by weight, in the 1e-4 steps results.json shows, so that the
    shares add up to exactly ``points`` (largest remainders get the leftover steps): a submission
    that passes every test gets every point, not 9.9995 of 10. Equal remainders go by node id,
    never by the order the tests finished in, so two grades give each test the same share."""
    total = sum(test.weight for test in tests)
    if total <= 0:
        for test in tests:
            test.max_score = 0.0
        return
    steps = round(points * 10_000)
    exact = [steps * test.weight / total for test in tests]
    shares = [math.floor(value) for value in exact]
    by_remainder = sorted(range(len(tests)), key=lambda i: (shares[i] - exact[i], tests[i].suite, tests[i].nodeid))
    for index in by_remainder[: steps - sum(shares)]:
        shares[index] += 1
    for test, share in zip(tests, shares):
        test.max_score = share / 10_000


def rejected_tests(problems: list[Problem], message: str) -> list[GradedTest]:
    """One failing entry per problem with points, each worth all of them, for a submission that
    was refused before any test ran (a corrupt zip, or one over the limits); ``message`` says why."""
    tests = []
    for problem in problems:
        if problem.points > 0:
            nodeid = f"test_{problem.name}.py::<submission>"
            tests.append(GradedTest(problem, "visible", nodeid, Verdict(nodeid, "failed", message),
                                    max_score=problem.points))
    return tests


def rounded(value: float) -> float:
    """``value`` to the 1e-4 step results.json shows, halves rounded up."""
    return math.floor(value * 10_000 + 0.5) / 10_000


def problem_points(tests: list[GradedTest]) -> dict[str, dict]:
    """Per problem: its section, points earned, points graded here, and points left for a GPU grade.

    Written to results.json's ``extra_data`` (Gradescope stores it and never shows it), where the
    batch grader reads each problem's points for the class CSV.
    """
    points: dict[str, dict] = {}
    for test in tests:
        entry = points.setdefault(test.problem.name, {"section": test.problem.section, "score": 0.0,
                                                      "max_score": 0.0, "gpu_later": 0.0})
        if test.outcome.status == "not_graded":
            entry["gpu_later"] += rounded(test.max_score)
        else:  # rounded as the tests' entries are, so the problems add up to the score
            entry["score"] += rounded(test.score)
            entry["max_score"] += rounded(test.max_score)
    return {name: {key: rounded(value) if isinstance(value, float) else value for key, value in entry.items()}
            for name, entry in points.items()}
