"""Grade one submission several times and check that every test gets the same verdict and score.

Staff only. The acceptance check of "same submission, same grade": run it on a busy machine
(``--spin N`` starts N processes that keep a core busy each, for the whole check) and on a GPU
runner. Prints one line per grade and a table of every test whose verdict or score differed;
exits 1 if any did.

    python -m autograder.tools.same_grade SUBMISSION --times 5 --spin 4 --problems flash_forward_pytorch \
        --out /tmp/same-grade
    python -m autograder.tools.same_grade --mutant shape_dependent_bug ...   # a catalog mutant by name
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.same_grade")

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def verdicts(results: dict) -> dict[str, tuple[str, float]]:
    """{test name: (status, score)} of a results.json."""
    return {test["name"]: (test["status"], round(float(test["score"]), 6)) for test in results["tests"]}


def differences(grades: list[dict[str, tuple[str, float]]]) -> list[str]:
    """Tests whose (status, score) is not the same in every grade, each with its values."""
    names = sorted(set().union(*grades)) if grades else []
    lines = []
    for name in names:
        seen = [grade.get(name, ("absent", 0.0)) for grade in grades]
        if len(set(seen)) > 1:
            lines.append(f"{name}: " + "; ".join(f"{status} {score:g}" for status, score in seen))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submission", nargs="?", help="a submission folder or zip")
    parser.add_argument("--mutant", help="grade this mutant of fixtures/mutants instead")
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--spin", type=int, default=0, help="busy processes to run alongside")
    parser.add_argument("--problems", default="", help="comma-separated problems (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from autograder.grade import GradeOptions, grade

    out = args.out or Path(tempfile.mkdtemp(prefix="same-grade-"))
    submission = args.submission
    if args.mutant:
        from fixtures import materialize, mutants

        folder = out / "mutant"
        folder.parent.mkdir(parents=True, exist_ok=True)
        out.chmod(0o755)
        submission = materialize(mutants.get(args.mutant), folder / args.mutant)
    if submission is None:
        parser.error("give a SUBMISSION or --mutant NAME")
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.spin)]
    for process in spinners:
        process.start()
    grades = []
    try:
        for index in range(args.times):
            began = time.monotonic()
            report = grade(GradeOptions(submission=Path(submission), out=out / f"grade{index}", quiet=True,
                                        problems=[p for p in args.problems.split(",") if p] or None))
            grades.append(verdicts(report.results))
            print(f"grade {index}: {report.results['score']:.4f} points, {len(grades[-1])} tests, "
                  f"{time.monotonic() - began:.0f} s", flush=True)
    finally:
        stop.set()
        for process in spinners:
            process.join(timeout=5)
    lines = differences(grades)
    print(f"{len(lines)} test(s) differed across {len(grades)} grades" + (":" if lines else ""))
    for line in lines:
        print("  " + line)
    (out / "same_grade.json").write_text(json.dumps({"grades": len(grades), "differed": lines}, indent=1))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
