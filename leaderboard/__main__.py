"""Command line of the leaderboard (staff run it; ``--help`` on each command says more).

    python -m leaderboard run SUBMISSION --name NAME [--quick] [--cpu] [--repeats N] [--store PATH] [--same-user]
    python -m leaderboard table [--store PATH] [--out DIR] [--all]
    python -m leaderboard selftest [--cpu] [--out DIR] [--only NAME ...] [--same-user]
    python -m leaderboard batch EXPORT [--out DIR] [--cluster local|slurm] [--gpus auto] [--quick] [--cpu] [--dry-run]

One flag means one thing in every command: ``--cpu`` runs the pipeline on a CPU (a small
problem under Triton's interpreter; its times mean nothing; its records are marked
``cpu``), and ``--dry-run`` (batch only) prints what would run, shell-quoted, and runs
nothing. SUBMISSION is a directory holding adapters.py and cs336_systems/, or the zip that
make_submission.sh writes (or a folder holding only that zip), read as the grader reads it.

Run ``run`` and ``selftest`` as root: the submission then runs as an unprivileged uid of its own.

Exit status of ``run``: 0 accepted, 1 refused, 2 could not run here (no GPU, or no isolation:
not root without ``--same-user``, or a kit or interpreter the sandbox uid could write or not
read), 3 the submission itself cannot be run (a corrupt zip, no adapters.py): the same on any
machine, so a batch does not retry it.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m leaderboard")

import argparse
import sys
from pathlib import Path

from leaderboard.store import DEFAULT_STORE, STORE_DIR, moved_store_message, read_records
from harness import gpus

NO_GPU = (
    "leaderboard run: no CUDA GPU found. The official timing needs one (the leaderboard runs on "
    "an H200). To test the pipeline on this machine, add --cpu (a small problem under "
    "Triton's interpreter; its times mean nothing and it is not recorded unless --store is given)."
)

NOT_RUNNABLE = 3  # run's exit status for a submission that cannot be run anywhere (see the docstring)

NO_COURSE_SECRET = (
    "leaderboard batch: {flag} is refused: the leaderboard uses no course secret (each run's parent draws "
    "its own seed for every checked input; leaderboard/README.md, 'The course secret'); drop {flag}, which "
    "belongs to `autograder batch`"
)

SAME_USER_HELP = (
    "without root: let the worker run as yourself instead of refusing. It is still a separate process, but "
    "nothing stands between it and your files: only for code you trust. As root the worker always runs as "
    "an unprivileged uid of its own. (Formerly --unisolated, still accepted.)"
)


def _refuse_old_flags(args: argparse.Namespace) -> str | None:
    """The one-line refusal of a flag this command no longer, or never, takes (an old spelling, or
    the grader's batch's --bundle/--secret), naming what to do instead; None when there is none."""
    if getattr(args, "old_dry_run", False):
        return (f"leaderboard {args.command}: --dry-run now only means 'print what would run' (leaderboard batch); "
                "to run the pipeline on a CPU, use --cpu")
    if getattr(args, "old_timing_dry_run", False):
        return "leaderboard batch: --timing-dry-run is now --cpu (the same flag as run and selftest)"
    for flag in ("bundle", "secret"):  # the grader's batch takes these; a TA may carry them over
        if getattr(args, f"course_{flag}", None) is not None:
            return NO_COURSE_SECRET.format(flag=f"--{flag}")
    return None


def _store_left_behind(args: argparse.Namespace) -> str | None:
    """The refusal when this command would use a store of records/leaderboard/ while the file it
    replaces still holds records inside the code package (store.moved_store_message)."""
    if args.command not in ("run", "table", "batch"):
        return None
    cpu = getattr(args, "cpu", False)
    store = args.store if args.store is not None else (None if cpu else DEFAULT_STORE)  # a CPU run records nowhere
    message = store and moved_store_message(store)
    return f"leaderboard {args.command}: {message}" if message else None


def cmd_run(args: argparse.Namespace) -> int:
    import tempfile

    from harness.submission import (
        SubmissionError,
        SubmissionNotFound,
        locate_submission,
        refuse_broken,
        resolve_submission_dir,
    )

    from autograder.intake import SubmissionRejected, copy_submission

    with tempfile.TemporaryDirectory(prefix="cs336-leaderboard-zip-") as unpacked:
        source = Path(args.submission)
        try:
            located = locate_submission(source)
        except SubmissionNotFound:
            located = source
        if located.is_file():  # a zip, or a folder holding only one: read as the grader reads it
            try:
                report = copy_submission(located, Path(unpacked) / "submission")
                refuse_broken(located, report.broken)  # timed whole or not at all, as a folder is
            except (SubmissionRejected, SubmissionNotFound, SubmissionError) as error:
                print(f"leaderboard run: {located}: not timed: {error}", file=sys.stderr)
                return NOT_RUNNABLE
            return _run(args, Path(unpacked) / "submission", str(located))
        try:
            directory = resolve_submission_dir(args.submission, Path.cwd())
        except SubmissionError as error:
            print(f"leaderboard run: {error}", file=sys.stderr)
            return NOT_RUNNABLE
        return _run(args, directory, None)


def _run(args: argparse.Namespace, directory: Path, zip_path: str | None) -> int:
    """``run`` on a submission directory; ``zip_path``: the zip it was unpacked from, for the record."""
    from harness.submission import SubmissionError, resolve_submission_dir

    from leaderboard.parent import describe, run_submission
    from leaderboard.worker_setup import SandboxUnavailable
    from leaderboard.store import append_record

    if zip_path is not None:
        try:
            resolve_submission_dir(str(directory), Path.cwd())
        except SubmissionError as error:
            print(f"leaderboard run: {zip_path}: {error}", file=sys.stderr)
            return NOT_RUNNABLE
    if not args.cpu and not gpus.count():
        print(NO_GPU, file=sys.stderr)
        return 2
    mode = "cpu" if args.cpu else "quick" if args.quick else "official"
    store = args.store if args.store is not None else (None if args.cpu else DEFAULT_STORE)
    print(f"leaderboard run: {args.name} from {zip_path or directory} ({mode}, {args.repeats} timing(s))", flush=True)
    try:
        record = run_submission(directory, args.name, mode, args.repeats, store=None if zip_path else store,
                                same_user=args.same_user)
    except SandboxUnavailable as error:
        print(f"leaderboard run: cannot isolate the submission: {error}", file=sys.stderr)
        return 2
    except SubmissionError as error:
        print(f"leaderboard run: not timed: {error}", file=sys.stderr)
        return NOT_RUNNABLE
    if zip_path is not None:
        record["submission"] = zip_path  # not the temporary folder it was unpacked to
        if store is not None:
            append_record(record, store)
    print(describe(record))
    print(f"recorded in {store}" if store is not None else "not recorded (a --cpu run; pass --store PATH to record)")
    return 0 if record["accepted"] else 1


def cmd_table(args: argparse.Namespace) -> int:
    from leaderboard.table import render_markdown, write_table

    records = read_records(args.store)
    markdown, png = write_table(records, args.out, include_unofficial=args.all)
    print(render_markdown(records, include_unofficial=args.all))
    print(f"written: {markdown}" + (f", {png}" if png else ""))
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from leaderboard.selftest import run_selftest

    if not args.cpu and not gpus.count():
        print(NO_GPU.replace("leaderboard run", "leaderboard selftest"), file=sys.stderr)
        return 2
    from leaderboard.worker_setup import SandboxUnavailable

    try:
        return run_selftest(args.out, cpu=args.cpu, only=args.only, same_user=args.same_user)
    except SandboxUnavailable as error:
        print(f"leaderboard selftest: cannot isolate the submissions: {error}", file=sys.stderr)
        return 2


def cmd_batch(args: argparse.Namespace) -> int:
    from autograder.batch.executors import SlotError
    from autograder.batch.export import ExportError

    from leaderboard.batch import leaderboard_batch

    try:
        return leaderboard_batch(args)
    except (ExportError, SlotError) as error:
        print(f"leaderboard batch: {error}", file=sys.stderr)
        return 2


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1; got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from leaderboard.selftest import DEFAULT_OUT

    parser = argparse.ArgumentParser(prog="python -m leaderboard", description="The FlashAttention-2 leaderboard.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="check and time one submission, and record the result")
    run.add_argument("submission", help="directory holding adapters.py and cs336_systems/, or a submission zip")
    run.add_argument("--name", required=True, help="the name shown on the leaderboard")
    speed = run.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="short timings (rep 1 s) for iterating; not ranked")
    speed.add_argument("--cpu", action="store_true", help="CPU: a small problem under Triton's interpreter; tests the pipeline")
    run.add_argument("--dry-run", dest="old_dry_run", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--repeats", type=positive_int, default=1, help="time the official loop this many times (reports the median and spread)")
    run.add_argument("--store", type=Path, default=None, help="results store (default records/leaderboard/records.jsonl; --cpu runs: none)")
    run.add_argument("--same-user", action="store_true", help=SAME_USER_HELP)
    run.add_argument("--unisolated", dest="same_user", action="store_true", help=argparse.SUPPRESS)  # the old spelling
    run.set_defaults(handler=cmd_run)

    table = commands.add_parser("table", help="render the ranking as Markdown and PNG")
    table.add_argument("--store", type=Path, default=DEFAULT_STORE, help="results store (default records/leaderboard/records.jsonl)")
    table.add_argument("--out", type=Path, default=STORE_DIR, help="folder for leaderboard.md and leaderboard.png (default records/leaderboard)")
    table.add_argument("--all", action="store_true", help="also rank --quick and --cpu runs (marked)")
    table.set_defaults(handler=cmd_table)

    selftest = commands.add_parser("selftest", help="the reference, the honest slow fixture and every cheat fixture")
    selftest.add_argument("--cpu", action="store_true", help="CPU: only the fixtures a CPU can judge")
    selftest.add_argument("--dry-run", dest="old_dry_run", action="store_true", help=argparse.SUPPRESS)
    selftest.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for records, summary and table (default records/leaderboard/selftest; with --only, a subfolder only-NAMES of it)")
    selftest.add_argument("--only", nargs="+", default=None, help="run only these entries (e.g. reference cheat_sdpa)")
    selftest.add_argument("--same-user", action="store_true", help=SAME_USER_HELP)
    selftest.add_argument("--unisolated", dest="same_user", action="store_true", help=argparse.SUPPRESS)
    selftest.set_defaults(handler=cmd_selftest)

    from autograder.batch.driver import add_flags

    batch = commands.add_parser("batch", help="time every submission of a Gradescope export, one GPU each, and "
                                "write the table")
    add_flags(batch, "cs336-leaderboard")
    batch.add_argument("--out", type=Path, default=STORE_DIR / "batch",
                       help="folder for each run's log and record (default records/leaderboard/batch)")
    batch.add_argument("--store", type=Path, default=None,
                       help="results store the records join (default records/leaderboard/records.jsonl; "
                            "with --cpu, OUT/records.jsonl)")
    batch.add_argument("--table-out", type=Path, default=None, help="folder for leaderboard.md/png (default: the store's)")
    batch.add_argument("--quick", action="store_true", help="short timings (rep 1 s); not ranked")
    batch.add_argument("--cpu", action="store_true",
                       help="CPU: each run is a leaderboard run --cpu (tests the pipeline; times mean nothing)")
    batch.add_argument("--timing-dry-run", dest="old_timing_dry_run", action="store_true", help=argparse.SUPPRESS)
    batch.add_argument("--bundle", dest="course_bundle", help=argparse.SUPPRESS)  # refused: NO_COURSE_SECRET
    batch.add_argument("--secret", dest="course_secret", help=argparse.SUPPRESS)
    batch.add_argument("--repeats", type=positive_int, default=1, help="official loops per run (default 1)")
    batch.set_defaults(handler=cmd_batch)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    refusal = _refuse_old_flags(args) or _store_left_behind(args)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
