"""The score tables stay aligned whatever the problem names: the grader's (autograder/score_table.py)
and the student's local one (tests/score.py), which share a layout.

The manifest's longest names (``mixed_precision_accumulation``, 28 characters) are longer than the
24 the problem column once had, which pushed those rows' numbers out of their columns.
"""

from __future__ import annotations

import re

from autograder.manifest import Problem, load_manifest
from autograder.score_table import format_table
from autograder.scoring import GradedTest
from autograder.watchdog import Verdict
from tests.score import Outcome, format_table as score_table

LONG = Problem(name="a_problem_whose_name_is_far_longer_than_any_column", section="§9.9", points=2.0, files=())


def _misaligned(table: str) -> list[str]:
    """Rows whose points cell does not end where the header's 'points' ends."""
    lines = table.splitlines()
    header, end = lines[0], len(lines[0])
    assert header.rstrip().endswith("points"), header
    rows = [line for line in lines[1:] if re.search(r"\d+\.\d\d / \d+\.\d\d", line)]
    assert rows, table
    return [line for line in rows if not re.match(r"\d+\.\d\d / \d+\.\d\d$", line[:end].split("  ")[-1].strip())
            or line[end:end + 1] not in ("", " ")]


def test_the_graders_table_keeps_its_columns_with_long_names():
    problems = [*load_manifest().problems, LONG]
    tests = [GradedTest(problem=problem, suite=suite, nodeid=f"tests/test_{problem.name}.py::test_{suite}",
                        outcome=Verdict(f"tests/test_{problem.name}.py::test_{suite}", status), max_score=1.0)
             for problem in problems for suite, status in (("visible", "passed"), ("hidden", "failed"))]
    table = format_table(tests, problems)
    assert _misaligned(table) == [], table
    assert LONG.name in table and "mixed_precision_accumulation" in table


def test_the_local_score_table_keeps_its_columns_with_long_names():
    manifest = load_manifest()
    problems = {problem.name: {"section": problem.section, "points": problem.points, "visible_points": 1.0}
                for problem in [*manifest.problems, LONG]}
    tests = {f"test_{name}.py::test_one": {"problem": name, "points": 1.0} for name in problems}
    outcomes = [Outcome(key, "passed" if index % 2 else "failed", False) for index, key in enumerate(tests)]
    table = score_table(outcomes, {"problems": problems, "tests": tests})
    assert _misaligned(table) == [], table
    assert LONG.name in table
