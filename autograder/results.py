"""Turn test verdicts into points: the Gradescope ``results.json`` and the table a TA reads.

Read by staff changing how points are shared or shown. A problem's points (from the manifest)
are shared among all its tests, visible and hidden, by weight; only a passed test earns its
share. A test that needs a GPU on a runner without one keeps its share in ``max_score`` and
scores 0, with a message saying so, so a CPU grade is never mistaken for a full one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from autograder.manifest import Manifest, Problem
from autograder.runner import SuiteRun, Verdict

_VISIBLE_OUTPUT_CHARS = 4000


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
        total = sum(test.weight for test in mine)
        for test in mine:
            test.max_score = problem.points * test.weight / total if total > 0 else 0.0
    order = {problem.name: index for index, problem in enumerate(manifest.problems)}
    tests.sort(key=lambda test: (order[test.problem.name], test.suite != "visible"))
    return tests


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


def _rounded(value: float) -> float:
    return math.floor(value * 10_000 + 0.5) / 10_000


def entry_output(test: GradedTest, hidden_chars: int) -> str:
    outcome = test.outcome
    if outcome.status == "passed":
        return "passed"
    if test.suite == "hidden":
        message = outcome.message or "failed"
        return message if len(message) <= hidden_chars else message[: hidden_chars - 3] + "..."
    message = outcome.message or "failed"
    if len(message) > _VISIBLE_OUTPUT_CHARS:
        message = message[: _VISIBLE_OUTPUT_CHARS - 3] + "..."
    detail = outcome.text.strip()
    if not detail or detail in message:
        return message
    room = max(500, _VISIBLE_OUTPUT_CHARS - len(message))
    return f"{message}\n\n{detail if len(detail) <= room else '...' + detail[-room:]}"


def results_json(tests: list[GradedTest], manifest: Manifest, *, execution_time: float, output: str,
                 leaderboard: list | None = None) -> dict:
    """The Gradescope results dict: score, execution_time, output, tests[] (and leaderboard)."""
    entries = []
    for test in tests:
        entries.append({
            "name": f"{test.problem.section} {test.problem.name} [{test.suite}] {test.key}",
            "score": _rounded(test.score),
            "max_score": _rounded(test.max_score),
            "status": "passed" if test.outcome.status == "passed" else "failed",
            "output": entry_output(test, manifest.settings.hidden_output_chars),
            "visibility": manifest.settings.hidden_visibility if test.suite == "hidden" else "visible",
        })
    result = {
        "score": _rounded(sum(test.score for test in tests)),
        "execution_time": int(round(execution_time)),
        "output": output,
        "tests": entries,
    }
    if leaderboard:
        result["leaderboard"] = leaderboard
    return result


def write_results(path: Path, results: dict) -> None:
    """Write ``results`` atomically (a half-written file is never left behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".partial")
    temporary.write_text(json.dumps(results, indent=1))
    temporary.replace(path)


def leaderboard_entries(data) -> list:
    """Gradescope leaderboard entries from a JSON value: a list of {name, value[, order]} kept as is,
    or a {name: value} dict (lower is better)."""
    if isinstance(data, list):
        return [dict(entry) for entry in data if isinstance(entry, dict) and "name" in entry and "value" in entry]
    if isinstance(data, dict):
        return [{"name": str(name), "value": value, "order": "asc"} for name, value in data.items()]
    raise ValueError("the leaderboard JSON must be a list of {name, value} objects or a {name: value} object")


def format_table(tests: list[GradedTest], problems: list[Problem]) -> str:
    """A per-problem table: passed/total per suite, tests needing a GPU, points."""
    header = f"{'section':<8}{'problem':<24}{'visible':>9}{'hidden':>9}{'needs GPU':>11}{'points':>15}"
    lines = [header, "-" * len(header)]
    total = maximum = gpu_points = 0.0
    for problem in problems:
        mine = [test for test in tests if test.problem.name == problem.name]
        if not mine and problem.points == 0:
            continue
        cells = []
        for suite in ("visible", "hidden"):
            graded = [test for test in mine if test.suite == suite and test.outcome.status != "not_graded"]
            passed = sum(test.outcome.status == "passed" for test in graded)
            cells.append(f"{passed}/{len(graded)}")
        gpu = [test for test in mine if test.outcome.status == "not_graded"]
        score = sum(test.score for test in mine)
        top = sum(test.max_score for test in mine)
        total, maximum = total + score, maximum + top
        gpu_points += sum(test.max_score for test in gpu)
        gradable_here = top - sum(test.max_score for test in gpu)
        mark = "  < lost points" if score + 1e-9 < gradable_here else ""
        lines.append(f"{problem.section:<8}{problem.name:<24}{cells[0]:>9}{cells[1]:>9}"
                     f"{(str(len(gpu)) if gpu else '-'):>11}{f'{score:.2f} / {top:.2f}':>15}{mark}")
    lines.append("-" * len(header))
    percent = 100.0 * total / maximum if maximum else 0.0
    lines.append(f"{'total':<32}{'':>29}{f'{total:.2f} / {maximum:.2f}':>15}  ({percent:.1f}%)")
    if gpu_points > 0:
        gradable = maximum - gpu_points
        share = 100.0 * total / gradable if gradable else 0.0
        lines.append(f"{gpu_points:.2f} points need a GPU runner and were not graded here; "
                     f"of the {gradable:.2f} points graded here this submission earned {total:.2f} ({share:.1f}%)")
    return "\n".join(lines)
