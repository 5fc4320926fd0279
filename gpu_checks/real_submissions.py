"""Grade real submissions' FlashAttention problems one at a time, timed, and compare with full autotuning.

Run from the repo root on a GPU machine, as root:
``python3 gpu_checks/real_submissions.py SUBMISSIONS OUTDIR [--full NAME,NAME]``.

SUBMISSIONS is a folder of kit submissions, one folder each (for example written by
``python -m autograder.tools.cs336_checkout`` from checkouts of CS336's repository). Each is
graded alone on the three FlashAttention problems, as the grader grades a class: every
speed-up on (no benchmarking of autotune configs outside timing tests: each test runs each config
once; fuzzed shapes drawn to share kernels; the grade's chains across the cores). The submissions named by
``--full`` are graded a second time with ``CS336_AUTOTUNE=full``: every test's autotuners
benchmark every config, as they would with none of the autotuning speed-up, and each test's
verdict is compared with the first grade's. That second grade gets the whole grade's time limit
(1500 s), not the FlashAttention grade's 225 s, so that no verdict differs only because time ran out.

Writes OUTDIR/summary.md (one row per grade: seconds, score, tests failed, and for a second
grade the tests whose verdict differed) and OUTDIR/<name>/results.json and grade.log. Prints the
table. Exit 1 when a first grade took over ``--limit`` seconds (default 240, the kit's bound; a
full-autotuning grade is only compared) or a second grade's verdicts differ; exit 2, before grading, when a name given is not a submission
folder or this Python lacks the ``cs336-systems`` metadata that ``setup.sh`` installs (CS336's
own ``cs336_systems/__init__.py`` reads it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from autograder.tools.same_grade import differences, verdicts  # noqa: E402

PROBLEMS = "flash_forward_pytorch,flash_forward_triton,flash_backward"
FULL_LIMIT_S = 1500  # a full-autotuning grade is the comparison, not the product: the whole grade's limit, not 225 s


def grade(submission: Path, out: Path, full_autotune: bool) -> tuple[float, dict]:
    """Grade ``submission`` into ``out``; its wall seconds and results.json."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("CS336_AUTOTUNE", None)
    if full_autotune:
        env["CS336_AUTOTUNE"] = "full"
    started = time.monotonic()
    with open(out / "grade.log", "w") as log:
        subprocess.run([sys.executable, "-m", "autograder", "grade", str(submission), "--out", str(out),
                        "--problems", PROBLEMS, "--require-gpu", "--verbose",
                        *(["--timeout", str(FULL_LIMIT_S)] if full_autotune else [])],
                       cwd=KIT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"score": 0.0, "tests": []}
    return seconds, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--full", default="", help="comma-separated submissions to grade again with CS336_AUTOTUNE=full")
    parser.add_argument("--only", default="", help="comma-separated submissions to grade (default: every folder)")
    parser.add_argument("--limit", type=float, default=240.0, help="seconds a grade may take")
    args = parser.parse_args(argv)
    try:
        importlib.metadata.version("cs336-systems")
    except importlib.metadata.PackageNotFoundError:
        print("real_submissions: this Python has no metadata for cs336-systems, which CS336's own "
              "cs336_systems/__init__.py reads, so every such submission would fail at import; run it with the "
              "kit's .venv/bin/python after bash setup.sh (its editable install provides the metadata)", file=sys.stderr)
        return 2
    names = sorted(p.name for p in args.submissions.iterdir() if (p / "adapters.py").is_file())
    unknown = sorted(set(filter(None, (args.only + "," + args.full).split(","))) - set(names))
    if unknown:
        print(f"real_submissions: no submission folder (with adapters.py) named {', '.join(unknown)} in "
              f"{args.submissions}; there are: {', '.join(names)}", file=sys.stderr)
        return 2
    if args.only:
        names = [name for name in names if name in args.only.split(",")]
    rows = ["| submission | autotune | seconds | score | failed tests | verdicts unlike the first grade |",
            "| --- | --- | ---: | ---: | ---: | --- |"]
    ok = True
    summary = args.out / "summary.md"
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        runs = [False] + ([True] if name in args.full.split(",") else [])
        first = None
        for full in runs:
            seconds, results = grade(args.submissions / name, args.out / (name + ("-full" if full else "")), full)
            got = verdicts(results)
            failed = sum(status != "passed" for status, _ in got.values())
            unlike = "" if first is None else ("; ".join(differences([first, got])) or "none")
            first = got if first is None else first
            ok &= (full or seconds <= args.limit) and unlike in ("", "none")  # the bound is the product's grade's
            row = (f"| {name} | {'full' if full else 'each config, untimed'} | {seconds:.1f} | {results.get('score', 0):.2f} "
                   f"| {failed} of {len(got)} | {unlike or '-'} |")
            print(row, flush=True)
            rows.append(row)
            summary.write_text("\n".join(rows) + "\n")  # kept as it grows: a killed run keeps its rows
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
