"""``python -m leaderboard batch EXPORT``: time every submission of a Gradescope export.

Read by staff who run the leaderboard for a class. Each submission is timed by its own
``python -m leaderboard run`` process, exactly as one run is, on this machine's GPUs (one
timing per GPU at a time: a GPU is never shared by two timings) or as a Slurm job array with
one GPU a job (autograder/batch/executors.py, the batch grader's executors). Each run writes
its record to its own store under ``--out``; when a run finishes, its records are appended to
the leaderboard's store once, and the table is rendered from that store (leaderboard/table.py).

    <out>/runs/<id>/run.log, records.jsonl, batch.json   one submission's run
    <out>/summary.md                                     counts, throughput, slowest, failures

A rerun skips submissions already timed with the same leaderboard code, submission hash and
mode. A run that exits 2 (it could not run) or leaves no record is retried once, then reported.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

from autograder.batch.executors import Job, Outcome, Progress, local_devices, run_local, run_submitit, run_with_retry
from autograder.batch.executors import slurm_script
from autograder.batch.export import read_export
from leaderboard.store import DEFAULT_STORE, append_record, read_records
from tests.submission import SubmissionNotFound, locate_submission, submission_hash

ROOT = Path(__file__).resolve().parent.parent
RUN_LIMIT_S = 1200  # the worker's own limit is 600 s; the parent's matmul rate and the check come on top


def code_version() -> str:
    """A short hash of the leaderboard's code (what decides a timing and a verdict)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "leaderboard").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _last_line(log: str) -> str:
    """The last line a run printed (its reason, when it could not run), cut to 300 characters."""
    try:
        lines = [line for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"


def _judge(job: Job, outcome: Outcome) -> str | None:
    if outcome.returncode is None:
        return outcome.error or "the run never finished"
    if outcome.returncode not in (0, 1):  # 0 accepted, 1 refused: both are results
        return f"the run could not run (exit status {outcome.returncode}: {_last_line(job.log)}; see {job.log})"
    if not read_records(Path(job.log).parent / "records.jsonl"):
        return "the run left no record"
    return None


def leaderboard_batch(args) -> int:
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    mode = "dry-run" if args.dry_run_timing else "quick" if args.quick else "official"
    store = Path(args.store) if args.store else (out / "records.jsonl" if mode == "dry-run" else DEFAULT_STORE)
    submissions = read_export(Path(args.export), out)
    if args.executor == "local":
        devices = local_devices(args.gpus, args.jobs)
        if devices[0] is None and mode != "dry-run":
            print("leaderboard batch: no GPU found; timings need one each (use --cpu to test the "
                  "pipeline on a CPU)", file=sys.stderr)
            return 2
    else:
        devices = []
    version = code_version()
    todo, keys = [], {}
    for submission in submissions:
        folder = out / "runs" / submission.id
        key = {"code_version": version, "submission_hash": submission_hash(submission.path), "mode": mode,
               "repeats": args.repeats}
        keys[submission.id] = key
        try:
            record = json.loads((folder / "batch.json").read_text())
            if record.get("status") == "done" and all(record.get(k) == v for k, v in key.items()):
                continue
        except (OSError, ValueError):
            pass
        try:
            path = locate_submission(submission.path)
        except SubmissionNotFound:
            path = submission.path
        argv = [sys.executable, "-m", "leaderboard", "run", str(path), "--name", submission.label,
                "--store", str(folder / "records.jsonl"), "--repeats", str(args.repeats)]
        argv += ["--cpu"] if mode == "dry-run" else ["--quick"] if mode == "quick" else []
        todo.append(Job(submission.id, submission.label, tuple(argv), str(ROOT), str(folder / "run.log"), RUN_LIMIT_S))
    where = (f"this machine, {len(devices)} {'GPU' if devices[0] is not None else 'CPU'} slot(s)"
             if args.executor == "local" else f"{args.executor} (one GPU a job)")
    print(f"leaderboard batch: {len(submissions)} submission(s); {len(submissions) - len(todo)} already timed; "
          f"{len(todo)} to time ({mode}) on {where}", flush=True)
    if args.dry_run:
        for job in todo:
            print("  " + shlex.join(job.argv))
        if args.executor == "slurm":
            print(slurm_script(out / "slurm", args.slurm, max(1, len(todo))))
        return 0
    for job in todo:
        (Path(job.log).parent / "records.jsonl").unlink(missing_ok=True)
        (Path(job.log).parent / "batch.json").unlink(missing_ok=True)
    progress = Progress("timings")
    if args.executor == "local":
        def run(jobs):
            return run_local(jobs, devices, _judge, progress)
    else:
        cluster = {"slurm": "slurm", "submitit-local": "local", "submitit-debug": "debug"}[args.executor]

        def run(jobs):
            return run_submitit(jobs, out / "slurm", cluster, args.slurm, _judge, progress,
                                poll_s=15.0 if cluster == "slurm" else 2.0, gpus=mode != "dry-run")
    batch = run_with_retry(todo, run, _judge)
    for job in todo:
        folder = Path(job.log).parent
        failed = job.key in batch.failures
        if not failed:
            for record in read_records(folder / "records.jsonl"):
                append_record(record, store)
        outcome = batch.outcomes.get(job.key)
        (folder / "batch.json").write_text(json.dumps({
            **keys[job.key], "status": "failed" if failed else "done", "attempts": batch.attempts.get(job.key, 0),
            "seconds": round(outcome.seconds, 1) if outcome else None, "failure": batch.failures.get(job.key, "")},
            indent=1))
    from leaderboard.table import write_table

    markdown, png = write_table(read_records(store), Path(args.table_out) if args.table_out else store.parent,
                                include_unofficial=mode != "official")
    seconds = time.monotonic() - started
    timed = len(todo) - len(batch.failures)
    lines = ["# Leaderboard batch", "",
             f"- {len(submissions)} submissions; timed now {timed}, skipped {len(submissions) - len(todo)}, "
             f"failed {len(batch.failures)}; {mode} on {where}; {seconds:.0f} s wall "
             f"({timed / (seconds / 3600) if timed and seconds else 0:.1f} submissions per hour)"]
    if progress.slowest():
        lines.append("- slowest: " + "; ".join(f"{label} {s:.0f} s" for label, s in progress.slowest()))
    lines += [f"- FAILED {key}: {why}" for key, why in batch.failures.items()]
    lines += [f"- store: {store}", f"- table: {markdown}" + (f", {png}" if png else "")]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 1 if batch.failures else 0
