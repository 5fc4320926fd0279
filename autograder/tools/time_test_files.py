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
other column as it is), and the total.

Timing every file alone takes as long as the sum of the files. A quicker estimate reads the
"test time per file" line that every grade appends to its ``--out``/grade.log (and prints with
``-v``), adding each chain's start to each file:

    .venv/bin/python -m autograder grade reference --require-gpu --expect-full --out results
    .venv/bin/python -m autograder.tools.time_test_files --column gpu --from-grade-log results/grade.log --write

``--write`` puts the numbers into the column in place (the other column kept).
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.time_test_files")

import argparse
import re
import time
from pathlib import Path

from autograder.chains import FILE_TIMES_LINE
from autograder.grade import SUITE_DIRS, GradeOptions, grade
from autograder.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "autograder" / "test_durations.toml"


def from_grade_log(log: str, start_s: float) -> list[tuple[str, float]]:
    """[(file, seconds)] from a grade's "test time per file" line: each file's summed test time
    plus ``start_s`` (a chain's process start and collection, which that line leaves out)."""
    lines = [line for line in log.splitlines() if line.startswith(FILE_TIMES_LINE)]
    if not lines:
        raise SystemExit(f"no '{FILE_TIMES_LINE.strip()}' line in the log: pass the grade.log a full grade leaves in its --out folder")
    measured = []
    for item in lines[-1][len(FILE_TIMES_LINE):].split("; "):
        path, seconds = item.rsplit(" ", 2)[:2]
        measured.append((path, float(seconds) + start_s))
    return measured


def write_column(text: str, column: str, measured: list[tuple[str, float]]) -> str:
    """``text`` (test_durations.toml) with ``column`` of each measured file set; a file without a
    line gets one. The other column, other keys and comments are kept."""
    for path, seconds in measured:
        value = f"{column} = {seconds:.0f}" if seconds >= 10 else f"{column} = {seconds:.1f}"
        line = re.compile(rf'^"{re.escape(path)}" = {{(.*)}}$', re.M)
        found = line.search(text)
        if not found:
            text = text.rstrip("\n") + f'\n"{path}" = {{ {value} }}\n'
            continue
        fields = found.group(1)
        if re.search(rf"\b{column} = [0-9.]+", fields):
            fields = re.sub(rf"\b{column} = [0-9.]+", value, fields)
        else:
            fields = f" {value},{fields}"
        text = text[:found.start(1)] + fields + text[found.end(1):]
    return text


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
    parser.add_argument("--from-grade-log", metavar="LOG", help="estimate from a full grade's printout instead of timing")
    parser.add_argument("--start-s", type=float, default=4.0,
                        help="with --from-grade-log: seconds added to each file for its chain's start (default 4)")
    parser.add_argument("--write", action="store_true", help="write the column into autograder/test_durations.toml")
    args = parser.parse_args()
    started = time.monotonic()
    problems = args.problems.split(",") if args.problems else None
    if args.from_grade_log:
        measured = from_grade_log(Path(args.from_grade_log).read_text(), args.start_s)
    else:
        measured = measure(Path(args.submission), tuple(args.suites.split(",")), problems)
    if args.write:
        DURATIONS.write_text(write_column(DURATIONS.read_text(), args.column, measured))
    for path, seconds in measured:
        print(f'"{path}" = {{ {args.column} = {seconds:.1f} }}', flush=True)
    total = sum(seconds for _, seconds in measured)
    print(f"# {len(measured)} files, {total:.1f} s in chains; measured in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
