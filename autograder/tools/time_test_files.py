"""Measure how long each graded test file takes in a process chain of its own, for the schedule.

Staff tool: its numbers fill the ``cpu`` or ``gpu`` column of autograder/test_durations.toml,
which the grader uses to pack test files into parallel process chains (autograder/schedule.py).
For every (suite, problem) pair it runs one real grade of the submission with ``--jobs 1``
restricted to that problem and suite, so exactly one chain runs, holding that problem's test
file(s) of that suite, and it reports the chain's wall time: the test process's start (forked
from the warm zygote), collection, every test, and exit. Files are measured one after another,
never two at once, so the numbers do not include the slowdown of sharing the machine.

Run from the repo root (the same stack as a grade; add ``--column gpu`` on a GPU runner):

    .venv/bin/python -m autograder.tools.time_test_files --submission reference --column cpu

It prints one TOML line per file, ready to paste into autograder/test_durations.toml (keep the
other column and the ``alone_on_gpu`` flags as they are), and the total.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from autograder.grade import SUITE_DIRS, GradeOptions, grade
from autograder.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]


def measure(submission: Path, suites: tuple[str, ...], problems: list[str] | None) -> list[tuple[str, float]]:
    """[(file path relative to the kit, chain wall seconds)] for each graded file of ``suites``.

    A (suite, problem) pair with several test files is timed as one chain and the seconds are
    split among its files in proportion to their sizes (no such pair exists today).
    """
    manifest = load_manifest()
    ungraded = set(manifest.settings.ungraded)
    wanted = [p for p in manifest.problems if problems is None or p.name in problems]
    measured = []
    for suite in suites:
        for problem in wanted:
            files = [path for path in sorted((ROOT / SUITE_DIRS[suite]).glob("test_*.py"))
                     if path.name not in ungraded and manifest.problem_of_file(path.name) == problem]
            if not files:
                continue
            report = grade(GradeOptions(submission=submission, problems=[problem.name], suites=(suite,),
                                        jobs=1, quiet=True))
            seconds = sum(run.wall_s for run in report.runs)
            sizes = [path.stat().st_size for path in files]
            for path, size in zip(files, sizes):
                measured.append((path.relative_to(ROOT).as_posix(), seconds * size / sum(sizes)))
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", default="reference", help="submission to grade (default: reference)")
    parser.add_argument("--column", choices=("cpu", "gpu"), default="cpu", help="which column the numbers are for")
    parser.add_argument("--suites", default="visible,hidden", help="comma-separated: visible, hidden")
    parser.add_argument("--problems", help="comma-separated problem names (default: all)")
    args = parser.parse_args()
    started = time.monotonic()
    problems = args.problems.split(",") if args.problems else None
    measured = measure(Path(args.submission), tuple(args.suites.split(",")), problems)
    for path, seconds in measured:
        print(f'"{path}" = {{ {args.column} = {seconds:.1f} }}', flush=True)
    total = sum(seconds for _, seconds in measured)
    print(f"# {len(measured)} files, {total:.1f} s in chains; measured in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
