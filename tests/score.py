"""Your local score: run the visible tests, then print the grader's per-problem table for them.

    python -m tests.score                                   # every visible test
    python -m tests.score tests/test_flash_forward_pytorch.py   # pytest arguments pick tests

Run it from the assignment folder (``make_submission.sh`` runs it too). Each test is worth what
the grader gives it: ``tests/points.toml`` lists that (in the course's own repository, where that
file does not exist, the same numbers are computed from the grader's points table). A test
earns its points only if it passes; a skipped test earns none, except that tests marked ``gpu``
are "not graded here" on a machine without CUDA, as on the grader's CPU runners, and so are
tests marked ``triton`` on a machine without Triton (macOS, Windows; harness/triton_marker.py).

The grader also runs hidden tests, which hold the rest of each problem's points: this table
shows only what the visible tests are worth, so the final grade can be lower than it suggests.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m tests.score")

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import gpus
from harness.gpu_marker import gpus_needed
from harness.triton_marker import needs_triton, triton_importable

ROOT = Path(__file__).resolve().parent.parent
POINTS_FILE = Path(__file__).resolve().parent / "points.toml"
PYTEST_ARGS = ("-q", "--tb=no", "-rfE")  # the failures are one line each; the table follows


@dataclass
class Outcome:
    """One visible test's result: status is "passed", "failed" or "not_graded" (needs a GPU, or Triton)."""

    key: str  # "<file name>::<test name>", as in the grader's table
    status: str
    gpu: bool
    triton_missing: bool = False  # needs Triton, which this machine lacks


def load_points() -> dict:
    """The points table: tests/points.toml, or, in the course's repository, the grader's own numbers."""
    if POINTS_FILE.is_file():
        return tomllib.loads(POINTS_FILE.read_text())
    if (ROOT / "autograder" / "student_points.py").is_file():
        from autograder.student_points import visible_points

        return visible_points(ROOT)
    raise SystemExit(f"[score] {POINTS_FILE.relative_to(ROOT)} is missing: it comes with the assignment; "
                     "restore it (for example with `git checkout tests/points.toml`)")


def _key(nodeid: str) -> str:
    path, _, name = nodeid.partition("::")
    return f"{Path(path).name}::{name}" if name else Path(path).name


class Recorder:
    """A pytest plugin that keeps each test's outcome as the grader judges it."""

    def __init__(self, gpus: int):
        self.gpus = gpus  # CUDA GPUs present
        self.gpu: dict[str, int] = {}  # GPUs each test needs
        self.no_triton: set[str] = set()  # tests that need Triton, on a machine without it
        self.phases: dict[str, list] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        self.gpu = {item.nodeid: gpus_needed(item) for item in items}
        self.no_triton = {item.nodeid for item in items  # as conftest.py skips them: a GPU test stays a GPU test
                          if self.gpu[item.nodeid] <= self.gpus and needs_triton(item) and not triton_importable()}

    def pytest_runtest_logreport(self, report):
        self.phases.setdefault(report.nodeid, []).append(report)

    def outcomes(self) -> list[Outcome]:
        found = []
        for nodeid, reports in self.phases.items():
            gpu = self.gpu.get(nodeid, 0)
            if any(report.failed for report in reports):
                status = "failed"
            elif any(report.skipped for report in reports):
                not_here = gpu > self.gpus or nodeid in self.no_triton
                status = "not_graded" if not_here else "failed"  # any other skip earns nothing
            elif any(report.when == "call" and report.passed for report in reports):
                status = "passed"
            else:
                status = "failed"
            found.append(Outcome(_key(nodeid), status, gpu > 0, nodeid in self.no_triton))
        return found


def format_table(outcomes: list[Outcome], points: dict) -> str:
    """The grader's per-problem table (the same layout) for the visible tests: the problem column is
    as wide as the longest name (at least 24), so columns stay aligned."""
    tests = points["tests"]
    width = max([24, *(len(name) + 2 for name in points["problems"])])
    header = f"{'section':<8}{'problem':<{width}}{'visible':>9}{'hidden':>9}{'needs GPU':>11}{'points':>15}"
    lines = [header, "-" * len(header)]
    total = maximum = gpu_points = triton_points = 0.0
    ran = {outcome.key: outcome for outcome in outcomes}
    for name, problem in points["problems"].items():
        keys = [key for key, test in tests.items() if test["problem"] == name]
        mine = [ran[key] for key in keys if key in ran]
        if not mine:
            continue
        graded = [outcome for outcome in mine if outcome.status != "not_graded"]
        passed = sum(outcome.status == "passed" for outcome in graded)
        not_here = [outcome for outcome in mine if outcome.status == "not_graded"]
        gpu = [outcome for outcome in not_here if not outcome.triton_missing]
        score = sum(tests[outcome.key]["points"] for outcome in mine if outcome.status == "passed")
        top = sum(tests[outcome.key]["points"] for outcome in mine)
        gpu_points += sum(tests[outcome.key]["points"] for outcome in gpu)
        triton_points += sum(tests[outcome.key]["points"] for outcome in not_here if outcome.triton_missing)
        total, maximum = total + score, maximum + top
        mark = "  < lost points" if score + 1e-9 < top - sum(tests[o.key]["points"] for o in not_here) else ""
        lines.append(f"{problem['section']:<8}{name:<{width}}{f'{passed}/{len(graded)}':>9}{'-':>9}"
                     f"{(str(len(gpu)) if gpu else '-'):>11}{f'{score:.2f} / {top:.2f}':>15}{mark}")
    lines.append("-" * len(header))
    percent = 100.0 * total / maximum if maximum else 0.0
    lines.append(f"{'total (visible tests)':<{8 + width}}{'':>29}{f'{total:.2f} / {maximum:.2f}':>15}  ({percent:.1f}%)")
    if gpu_points > 0:
        lines.append(f"{gpu_points:.2f} of these points are for tests that need a GPU, or more GPUs than this "
                     "machine has (not run here; the grader runs them where there are enough).")
    if triton_points > 0:
        lines.append(f"{triton_points:.2f} of these points are for Triton tests, not run here: this machine has no "
                     "Triton (see the note 'Triton tests skipped' above); the grader runs them.")
    all_points = sum(problem["points"] for problem in points["problems"].values())
    visible_points = sum(problem["visible_points"] for problem in points["problems"].values())
    lines.append(f"Hidden tests count too: the grader also runs hidden tests, worth the other "
                 f"{all_points - visible_points:.2f} of the assignment's {all_points:.2f} points.")
    missing = [key for key in tests if key not in ran]
    if missing and len(missing) < len(tests):
        lines.append(f"{len(missing)} visible tests did not run (not selected), so their points are not counted here.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    points = load_points()
    recorder = Recorder(gpus=gpus.count())
    code = pytest.main([*PYTEST_ARGS, *(argv or ["tests"])], plugins=[recorder])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        print(f"[score] pytest stopped with exit status {int(code)}: fix that first (no score)")
        return int(code)
    print()
    print(format_table(recorder.outcomes(), points))
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
