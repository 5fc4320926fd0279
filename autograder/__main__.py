"""Command line of the staff tools: ``python -m autograder {grade,batch,bundle,release} ...``.

    python -m autograder grade SUBMISSION [--out DIR] [--require-gpu] [--problems a,b] ...
    python -m autograder bundle [--out dist/gradescope_autograder.zip] [--edition 2025|2026]
    python -m autograder release [--out dist/student] [--edition 2025|2026]
    python -m autograder batch EXPORT --out DIR --bundle ZIP [--cluster local|slurm] [--gpus auto] [--jobs N]
                                   [--dry-run] [--partial]

SUBMISSION is a directory holding adapters.py and cs336_systems/, or the zip that
make_submission.sh writes. ``grade`` always writes DIR/results.json (Gradescope's format) and
prints a per-problem table; it exits 0 whenever it produced results, 2 when --require-gpu
finds no GPU, and 1 with --expect-full when not every gradable point was earned.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder")

import argparse
import json
import sys
from pathlib import Path


def _grade(args: argparse.Namespace) -> int:
    from autograder.grade import GradeOptions, grade
    from autograder.results import leaderboard_entries

    leaderboard = None
    if args.leaderboard_json:
        leaderboard = leaderboard_entries(json.loads(Path(args.leaderboard_json).read_text()))
    options = GradeOptions(
        submission=Path(args.submission), out=Path(args.out), keyword=args.k,
        problems=[name for name in args.problems.split(",") if name] if args.problems else None,
        tests=[nodeid for nodeid in args.tests.split(",") if nodeid] if args.tests else None,
        suites=tuple(args.suites.split(",")), test_timeout_s=args.test_timeout, total_timeout_s=args.timeout,
        require_gpu=args.require_gpu, same_user=args.same_user, jobs=args.jobs, leaderboard=leaderboard,
        verbose=args.verbose, quiet=args.quiet, zygote=not args.no_zygote,
        timeline=Path(args.timeline).resolve() if args.timeline else None,
    )
    if args.kit:
        options.kit = Path(args.kit)
    try:
        report = grade(options)
    except Exception:  # a grader bug: still leave a valid results.json that says so
        import traceback

        from autograder.results import write_results

        write_results(options.out / "results.json", {
            "score": 0, "execution_time": 0, "tests": [],
            "output": "The grader failed; please tell the course staff (this is not your fault).\n"
                      + traceback.format_exc()[-3000:]})
        raise
    if report.exit_code:
        return report.exit_code
    if args.expect_full:
        tests = report.tests
        gradable = sum(t.max_score for t in tests if t.outcome.status != "not_graded")
        earned = sum(t.score for t in tests)
        if earned + 1e-6 < gradable or not tests:
            print(f"grade: --expect-full: earned {earned:.2f} of {gradable:.2f} gradable points", file=sys.stderr)
            return 1
    return 0


def _bundle(args: argparse.Namespace) -> int:
    import os

    from autograder.bundle import SEED_FILE, BundleError, build_bundle

    secret = args.secret if args.secret is not None else os.environ.get("CS336_HIDDEN_SEED")
    try:
        path = build_bundle(Path(args.out), secret=secret, edition=args.edition)
    except BundleError as error:
        raise SystemExit(f"bundle: {error}")
    print(f"bundle: wrote {path} ({path.stat().st_size / 1e6:.2f} MB); upload it as the Gradescope autograder")
    how = "the one you chose" if secret is not None else "a fresh random one"
    print(f"bundle: hidden seed: {how}, in {SEED_FILE} (root only on the runner). To grade the GPU half with the "
          f"same hidden cases, read it back with: unzip -p {path} {SEED_FILE}")
    return 0


def _release(args: argparse.Namespace) -> int:
    from autograder.release import build_release

    path = build_release(Path(args.out), force=args.force, edition=args.edition)
    print(f"release: wrote the student tree to {path}")
    return 0


def _batch(args: argparse.Namespace) -> int:
    from autograder.batch.driver import cluster_from_flags
    from autograder.batch.executors import SlotError
    from autograder.batch.export import ExportError
    from autograder.batch.grading import BatchOptions, grade_batch
    from autograder.bundle import BundleError, course_secret_for_batch

    try:
        secret = course_secret_for_batch(Path(args.bundle) if args.bundle else None, args.secret)
    except BundleError as error:
        print(f"batch: {error}", file=sys.stderr)
        return 2

    if args.gpus_per_job < 0 or args.gpus_per_job == 0 and args.cluster == "local":
        raise SystemExit(f"batch: --gpus-per-job {args.gpus_per_job}: expected 1 or more (0, CPU jobs, is for "
                         "--executor slurm (--cluster slurm) on a CPU partition; on this machine use --gpus 0)")
    try:
        # submitit's jobs get GPUs on Slurm unless --gpus-per-job 0, and on its local executors when --gpus names some
        cluster = cluster_from_flags(args, "batch", gpus_per_job=args.gpus_per_job, cluster_gpus=(
            args.cluster == "slurm" and args.gpus_per_job > 0 or args.gpus not in ("0", "none", "auto")))
        options = BatchOptions(
            export=Path(args.export), out=Path(args.out), cluster=cluster,
            problems=[name for name in args.problems.split(",") if name] if args.problems else None,
            grade_jobs=args.grade_jobs, test_timeout=args.test_timeout, timeout=args.timeout,
            dry_run=args.dry_run, partial=args.partial, secret=secret)
        return grade_batch(options)
    except (ExportError, SlotError) as error:
        print(f"batch: {error}", file=sys.stderr)
        return 2


def _add_grade_parser(commands) -> None:
    grade = commands.add_parser("grade", help="grade one submission; write results.json and print a table")
    grade.add_argument("submission", help="directory with adapters.py and cs336_systems/, or a submission zip")
    grade.add_argument("--out", default="results", help="directory for results.json (default: ./results)")
    grade.add_argument("--problems", help="comma-separated problem names to grade (default: all)")
    grade.add_argument("-k", help="pytest -k expression to select tests (partial grade)")
    grade.add_argument("--tests", help="comma-separated test node ids to grade, e.g. "
                       "tests/test_nsys_profile.py::test_profiled_training_phases_in_order (partial grade)")
    grade.add_argument("--suites", default="visible,hidden", help="comma-separated: visible, hidden")
    grade.add_argument("--test-timeout", type=float, help="seconds one test may run (default: manifest)")
    grade.add_argument("--timeout", type=float, help="seconds the whole grade may run (default: manifest)")
    grade.add_argument("--require-gpu", action="store_true", help="fail (exit 2) when no CUDA GPU is present")
    grade.add_argument("--same-user", action="store_true",
                       help="when not root: let each executor (the separate process that runs the submission, "
                            "pytest --isolate) run as this user instead of refusing; only for code you trust, such "
                            "as the reference. As root every executor runs as an unprivileged user id of its own. "
                            "(Formerly --unisolated, still accepted.)")
    grade.add_argument("--unisolated", dest="same_user", action="store_true", help=argparse.SUPPRESS)  # the old spelling
    grade.add_argument("--jobs", type=int, help="test process chains at a time (default: up to 4 on a CPU; up to 16 on a GPU "
                            "runner, at most one per CPU and one per 8 GiB of GPU memory); a grade with only a few seconds "
                            "of tests starts fewer")
    grade.add_argument("--leaderboard-json", help="JSON with the submission's leaderboard time(s) to report")
    grade.add_argument("--expect-full", action="store_true",
                       help="exit 1 unless every point gradable on this runner was earned (for checking the reference)")
    grade.add_argument("--no-zygote", action="store_true",
                       help="start every test process fresh instead of forking it from a warm one (slower)")
    grade.add_argument("--kit", help=argparse.SUPPRESS)
    grade.add_argument("--timeline", help="append to this file a JSON line for each test process start and each "
                       "test's wait for the GPU, start and end, with its chain and wall-clock time: where a grade's "
                       "time went")
    grade.add_argument("-v", "--verbose", action="store_true", help="print every test as it finishes")
    grade.add_argument("-q", "--quiet", action="store_true", help="print nothing; just write results.json")
    grade.set_defaults(run=_grade)


def _add_batch_parser(commands) -> None:
    from autograder.batch.driver import add_flags

    batch = commands.add_parser("batch", help="grade every submission of a Gradescope export (local GPUs or Slurm); "
                                "write each results.json, a class CSV and histograms")
    add_flags(batch, "cs336-grade")
    batch.add_argument("--out", required=True, help="folder for results, logs, scores.csv, histograms, summary")
    batch.add_argument("--bundle", help="the Gradescope autograder zip that `bundle` wrote (the one uploaded): each "
                       "grade uses its course secret, so hidden cases and examples are Gradescope's. Required, "
                       "unless --secret or $CS336_HIDDEN_SEED gives the same secret")
    batch.add_argument("--secret", help="the course secret itself (the bundle's kit/autograder/hidden_seed), "
                       "instead of --bundle")
    batch.add_argument("--problems", help="grade only these problems (comma-separated; passed to each grade)")
    batch.add_argument("--grade-jobs", type=int, help="--jobs of each grade (test process chains at a time)")
    batch.add_argument("--gpus-per-job", type=int, default=1,
                       help="GPUs each grade gets (a local slot's CUDA_VISIBLE_DEVICES, or Slurm's --gpus-per-node); "
                            "2 grades part 2's NCCL tests, which one GPU leaves 'not graded' (default 1); "
                            "0 with --cluster slurm: CPU jobs, graded as on a CPU runner")
    batch.add_argument("--test-timeout", type=float, help="--test-timeout of each grade")
    batch.add_argument("--timeout", type=float, help="--timeout of each grade")
    batch.add_argument("--partial", action="store_true",
                       help="write scores.csv even when this runner could not grade every point (GPU tests on a "
                            "CPU: its Ungraded Points column says how many); without it such a batch writes no CSV "
                            "and exits 3")
    batch.set_defaults(run=_batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    _add_grade_parser(commands)

    bundle = commands.add_parser("bundle", help="build the Gradescope autograder zip")
    bundle.add_argument("--out", default="dist/gradescope_autograder.zip")
    bundle.add_argument("--secret", default=None,
                        help="the course's hidden seed to embed (at least 6 characters; default: $CS336_HIDDEN_SEED, "
                             "else a fresh random one)")
    bundle.add_argument("--edition", choices=("2025", "2026"), default=None,
                        help="the course edition to grade (default: the manifest's, 2025)")
    bundle.set_defaults(run=_bundle)

    release = commands.add_parser("release", help="build the student release tree")
    release.add_argument("--out", default="dist/student")
    release.add_argument("--force", action="store_true", help="replace --out if it exists")
    release.add_argument("--edition", choices=("2025", "2026"), default=None,
                         help="the course edition's problems, points and handout (default: the manifest's, 2025)")
    release.set_defaults(run=_release)

    _add_batch_parser(commands)

    args = parser.parse_args(argv)
    if args.command == "grade":
        bad = sorted(set(args.suites.split(",")) - {"visible", "hidden"})
        if bad:
            parser.error(f"--suites: unknown suite(s) {bad}; use visible and/or hidden")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
