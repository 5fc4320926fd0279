"""The per-problem score table a TA (or a student running the grader) reads in the console.

Read by ``grade.py``, which prints it after every grade, and by staff changing its columns
(autograder/selftests/test_score_tables.py keeps it aligned whatever the problem names). Per
problem: visible and hidden tests passed of those graded here, how many need a GPU runner, and
points earned of the problem's points; a problem that lost points it could earn here is marked.
"""

from __future__ import annotations

from autograder.manifest import Problem
from autograder.scoring import GradedTest


def format_table(tests: list[GradedTest], problems: list[Problem]) -> str:
    """A per-problem table: passed/total per suite, tests needing a GPU, points.

    The problem column is as wide as the longest name shown (at least 24), so columns stay aligned."""
    width = max([24, *(len(problem.name) + 2 for problem in problems)])
    header = f"{'section':<8}{'problem':<{width}}{'visible':>9}{'hidden':>9}{'needs GPU':>11}{'points':>15}"
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
        lines.append(f"{problem.section:<8}{problem.name:<{width}}{cells[0]:>9}{cells[1]:>9}"
                     f"{(str(len(gpu)) if gpu else '-'):>11}{f'{score:.2f} / {top:.2f}':>15}{mark}")
    lines.append("-" * len(header))
    percent = 100.0 * total / maximum if maximum else 0.0
    lines.append(f"{'total':<{8 + width}}{'':>29}{f'{total:.2f} / {maximum:.2f}':>15}  ({percent:.1f}%)")
    if gpu_points > 0:
        gradable = maximum - gpu_points
        share = 100.0 * total / gradable if gradable else 0.0
        lines.append(f"{gpu_points:.2f} points need a GPU runner (or more GPUs) and were not graded here; "
                     f"of the {gradable:.2f} points graded here this submission earned {total:.2f} ({share:.1f}%)")
    return "\n".join(lines)
