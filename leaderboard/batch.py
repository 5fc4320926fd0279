"""``python -m leaderboard batch EXPORT``: time every submission of a Gradescope export.

Read by staff who run the leaderboard for a class. Each submission is timed by its own
``python -m leaderboard run`` process, exactly as one run is, on this machine's GPUs (one
timing per GPU at a time: a GPU is never shared by two timings) or as a Slurm job array with
one GPU a job, by the batch grader's driver (autograder/batch/driver.py); this file says what a
timing job is, when it gave a result, and where its records go. Each run writes
its record to its own store under ``--out``; when a run finishes, its records are appended to
the leaderboard's store once, and the table is rendered from that store (leaderboard/table.py).

    <out>/runs/<id>/run.log, records.jsonl, batch.json   one submission's run
    <out>/summary.md                                     counts, throughput, slowest, failures

A rerun skips submissions already timed with the same leaderboard code, submission hash and
mode. A run that exits 2 (it could not run here) or leaves no record is retried once, then
reported. A run that exits 3 (the submission itself cannot be run: a corrupt zip, no
adapters.py) would fail the same way again: it is not retried, and the summary lists it apart,
"NOT TIMED", with the reason, as the grader's batch lists "NO TEST RAN".

The course secret (``autograder batch --bundle``) plays no part here: a run draws every input
from a seed its parent chooses afresh (leaderboard/parent.py), so there is none to carry.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.batch.driver import Task, Wording, cluster_from_flags, drive, summary_lines, version_hash
from autograder.batch.driver import write_summary
from autograder.batch.executors import Job, Outcome
from autograder.batch.export import read_export
from leaderboard.store import DEFAULT_STORE, append_record, read_records
from leaderboard.worker_setup import WORKER_MODULES
from harness.submission import SubmissionNotFound, locate_submission, submission_hash

ROOT = Path(__file__).resolve().parent.parent
# What decides a timing and a verdict: the parent's modules and every module the worker runs
# (confine/, executor/ and harness/ among them), so a change to any re-times the entries; the parent's replay
# (leaderboard/replay.py) runs the grader's replay process (harness/, executor/), so its code decides verdicts too
CODE_FILES = ("leaderboard/*.py", *WORKER_MODULES, "confine/*.py")
RUN_LIMIT_S = 1200  # the worker's own limit is 600 s; the parent's matmul rate and the check come on top
WORDING = Wording(command="leaderboard batch", title="Leaderboard batch", verb="time", done="timed", noun="timings",
                  version="code")


def code_version() -> str:
    """A short hash of the leaderboard's code (what decides a timing and a verdict)."""
    return version_hash(ROOT, CODE_FILES)


def _last_line(log: str) -> str:
    """The last line a run printed (its reason, when it could not run), cut to 300 characters."""
    try:
        lines = [line for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"


NOT_RUNNABLE = 3  # leaderboard run's exit status for a submission that cannot be run anywhere (__main__.py)


def _judge(job: Job, outcome: Outcome) -> str | None:
    if outcome.returncode is None:
        return outcome.error or "the run never finished"
    if outcome.returncode == NOT_RUNNABLE:
        return None  # a result: the submission cannot be timed, on any machine (listed apart, not retried)
    if outcome.returncode not in (0, 1):  # 0 accepted, 1 refused: both are results
        return f"the run could not run (exit status {outcome.returncode}: {_last_line(job.log)}; see {job.log})"
    if not read_records(Path(job.log).parent / "records.jsonl"):
        return "the run left no record"
    return None


def leaderboard_batch(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    mode = "cpu" if args.cpu else "quick" if args.quick else "official"
    store = Path(args.store) if args.store else (out / "records.jsonl" if mode == "cpu" else DEFAULT_STORE)
    submissions = read_export(Path(args.export), out)
    cluster = cluster_from_flags(args, WORDING.command, cluster_gpus=mode != "cpu")
    if cluster.name == "local" and not cluster.gpus and mode != "cpu" and not args.dry_run:  # a dry run runs nothing
        print("leaderboard batch: no GPU found; timings need one each (use --cpu to test the "
              "pipeline on a CPU)", file=sys.stderr)
        return 2
    version = code_version()
    tasks = []
    for submission in submissions:
        folder = out / "runs" / submission.id
        key = {"code_version": version, "submission_hash": submission_hash(submission.path), "mode": mode,
               "repeats": args.repeats}
        try:
            path = locate_submission(submission.path)
        except SubmissionNotFound:
            path = submission.path
        argv = [sys.executable, "-m", "leaderboard", "run", str(path), "--name", submission.label,
                "--store", str(folder / "records.jsonl"), "--repeats", str(args.repeats)]
        argv += ["--cpu"] if mode == "cpu" else ["--quick"] if mode == "quick" else []
        tasks.append(Task(Job(submission.id, submission.label, tuple(argv), str(ROOT), str(folder / "run.log"),
                              RUN_LIMIT_S), key))

    def collect(task: Task) -> None:  # a run's records join the store once, when it succeeded
        path = task.folder / "records.jsonl"
        for record in read_records(path):
            append_record(record, store)
        path.touch()  # a submission that cannot be run has none: its empty file says so on a rerun

    mode_note = f"mode: {mode}" + (" (each a leaderboard run --cpu: tests the pipeline; its times mean nothing)"
                                   if mode == "cpu" else "")
    ran = drive(tasks, cluster, out, _judge, WORDING, version=version, outputs=("records.jsonl",), collect=collect,
                dry_run=args.dry_run, source=f" in {args.export}", notes=[mode_note])
    if ran is None:
        return 0
    from leaderboard.table import write_table

    markdown, png = write_table(read_records(store), Path(args.table_out) if args.table_out else store.parent,
                                include_unofficial=mode != "official")
    not_timed = [(task, _last_line(task.job.log)) for task in tasks
                 if task.job.key not in ran.run.failures and not read_records(task.folder / "records.jsonl")]
    notes = [f"- {mode_note}", *(f"- NOT TIMED {task.job.key} ({task.job.label}): {why}" for task, why in not_timed)]
    lines = summary_lines(WORDING.title, ran.tally(f"code {version}"), WORDING.done, notes=notes,
                          body=[f"- store: {store}", f"- table: {markdown}" + (f", {png}" if png else "")])
    print(write_summary(out, lines), end="", flush=True)
    return 1 if ran.run.failures else 0
