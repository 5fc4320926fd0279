"""``python -m autograder batch EXPORT --out DIR``: grade every submission of a Gradescope export.

Read by staff grading a class. Each submission is graded by its own ``python -m autograder
grade`` process (the batch never imports student code), on this machine or on Slurm
(autograder/batch/executors.py). What it writes under ``--out``:

    submissions/<id>/results.json   the grade (Gradescope's format), as a single grade writes it
    submissions/<id>/grade.log      that grade's console output
    submissions/<id>/batch.json     the kit version, submission hash and grade flags it was graded
                                    with, its status, attempts and seconds (for resumption)
    scores.csv                      a row per student for Gradescope's score upload (report.py)
    histogram.md, histogram.png     scores per problem
    summary.md                      the end summary: counts, throughput, slowest, the points not
                                    graded, submissions where no test ran, failures

A grade on a runner without a GPU (or with fewer GPUs than part 2's tests need) leaves those
tests' points out of its score. Such a batch says so, with each problem's points, in summary.md,
on the console and in scores.csv's ``Ungraded Points`` column; and it writes no scores.csv at
all (exit status 3) unless ``--partial`` asks for one, so a CPU batch's totals are never uploaded
by mistake as final. Submissions where no test could run (a corrupt zip, no adapters.py; the
grade's ``extra_data.no_test_ran``) score 0 and are listed apart, with the reason.

A rerun skips every submission already graded with the same kit version, submission hash and
grade flags; a grade that fails (non-zero exit, no results.json) is retried once in the same
run and then reported (and retried again by the next run).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.batch.executors import (
    Job,
    Outcome,
    Progress,
    SlurmParams,
    local_devices,
    run_local,
    run_submitit,
    run_with_retry,
    slurm_script,
)
from autograder.batch.export import Submission, read_export
from autograder.batch.report import class_report
from autograder.manifest import load_manifest
from tests.submission import submission_hash

KIT = Path(__file__).resolve().parents[2]
# What decides a grade: the grader, the visible and hidden tests, the manifest, the kit's conftest.
GRADING_FILES = ("autograder/*.py", "autograder/manifest.toml", "autograder/test_durations.toml",
                 "autograder/grader_pytest.ini", "autograder/hidden_tests/**/*", "tests/**/*.py", "conftest.py")
EXECUTORS = ("local", "slurm", "submitit-local", "submitit-debug")
SLACK_S = 600  # a grade's process may run this much past the grade's own total limit before it is killed


@dataclass
class BatchOptions:
    """Everything ``grade_batch`` needs; autograder/__main__.py fills it from flags."""

    export: Path
    out: Path
    executor: str = "local"
    gpus: str = "auto"
    gpus_per_job: int = 1
    jobs: int = 2
    problems: list[str] | None = None
    grade_jobs: int | None = None
    test_timeout: float | None = None
    timeout: float | None = None
    slurm: SlurmParams = field(default_factory=SlurmParams)
    dry_run: bool = False
    partial: bool = False
    kit: Path = KIT
    poll_s: float | None = None  # between looks at submitted jobs; None: 15 s on Slurm, else 2 s


def kit_version(kit: Path = KIT) -> str:
    """A short hash of every file that decides a grade (GRADING_FILES)."""
    digest = hashlib.sha256()
    files = sorted({path for pattern in GRADING_FILES for path in kit.glob(pattern)
                    if path.is_file() and "__pycache__" not in path.parts})
    for path in files:
        digest.update(path.relative_to(kit).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _grade_flags(options: BatchOptions, gpu: bool) -> list[str]:
    flags = []
    if options.problems:
        flags += ["--problems", ",".join(options.problems)]
    if options.grade_jobs:
        flags += ["--jobs", str(options.grade_jobs)]
    if options.test_timeout:
        flags += ["--test-timeout", str(options.test_timeout)]
    if options.timeout:
        flags += ["--timeout", str(options.timeout)]
    if gpu:
        flags.append("--require-gpu")  # a node whose GPU is missing fails the job instead of grading on CPU
    return flags


def _already_graded(folder: Path, key: dict) -> bool:
    try:
        record = json.loads((folder / "batch.json").read_text())
        json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return False
    return record.get("status") == "done" and all(record.get(name) == value for name, value in key.items())


def _judge(job: Job, outcome: Outcome) -> str | None:
    """None when the grade left a results.json and exited 0; else why not."""
    if outcome.returncode is None:
        return outcome.error or "the grade never finished"
    if outcome.returncode != 0:
        return f"the grade exited with status {outcome.returncode} (see {job.log})"
    try:
        results = json.loads((Path(job.log).parent / "results.json").read_text())
    except (OSError, ValueError) as error:
        return f"no readable results.json ({error})"
    return None if isinstance(results, dict) and "score" in results else "results.json has no score"


def ungraded_points(results: dict) -> dict[str, float]:
    """Each problem's points that this grade could not grade on its runner (GPU tests on a CPU)."""
    problems = (results.get("extra_data") or {}).get("problems") or {}
    return {name: float(entry.get("gpu_later") or 0.0) for name, entry in problems.items()
            if float(entry.get("gpu_later") or 0.0) > 0}


def _ungraded_lines(graded: list[tuple], manifest) -> list[str]:
    """What the batch did not grade: the problems and points left out of the totals, or nothing."""
    per_problem: dict[str, float] = {}
    count = 0
    for _, results, status in graded:
        if results and status.startswith("graded"):
            left = ungraded_points(results)
            count += bool(left)
            for name, points in left.items():
                per_problem[name] = max(per_problem.get(name, 0.0), points)
    if not per_problem:
        return []
    sections = {p.name: p.section for p in manifest.problems}
    total = sum(per_problem.values())
    parts = "; ".join(f"{sections.get(name, '')} {name} {points:.2f}" for name, points in
                      sorted(per_problem.items(), key=lambda item: list(sections).index(item[0])
                             if item[0] in sections else 0))
    return [f"- NOT GRADED: {total:.2f} of {manifest.total_points:g} points of {count} submission(s) need a GPU "
            f"(or more GPUs) and were not graded on this runner; Total Score leaves them out: {parts}. "
            "Grade on a GPU machine for the final scores (python -m autograder batch EXPORT --out DIR on it)"]


def grade_batch(options: BatchOptions) -> int:
    """Grade the export; write results, CSV, histograms and the summary. Exit status: 0 when every
    submission was graded, 1 when some failed twice, 2 when nothing could run, 3 when some points
    were not graded on this runner and ``partial`` was not set (no scores.csv is written)."""
    started = time.monotonic()
    out = Path(options.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest()
    submissions = read_export(Path(options.export), out)
    if options.executor == "local":
        devices = local_devices(options.gpus, options.jobs, options.gpus_per_job)
        gpu = devices[0] is not None
    else:
        devices, gpu = [], (options.executor == "slurm" and options.gpus_per_job > 0
                            or options.gpus not in ("0", "none", "auto"))
    version = kit_version(options.kit)
    flags = _grade_flags(options, gpu)
    limit = (options.timeout or manifest.settings.total_timeout_s) + SLACK_S
    todo: list[Job] = []
    keys: dict[str, dict] = {}
    for submission in submissions:
        folder = out / "submissions" / submission.id
        key = {"kit_version": version, "submission_hash": submission_hash(submission.path), "grade_flags": flags,
               "gpus_per_job": options.gpus_per_job if gpu else 0}  # two GPUs grade tests one cannot
        keys[submission.id] = key
        if _already_graded(folder, key):
            continue
        argv = (sys.executable, "-m", "autograder", "grade", str(submission.path), "--out", str(folder), *flags)
        todo.append(Job(submission.id, submission.label, argv, str(options.kit), str(folder / "grade.log"), limit))
    per_job = f"{options.gpus_per_job} GPU{'s' * (options.gpus_per_job != 1)} a job"
    where = (f"this machine, {len(devices)} {'GPU' if gpu else 'CPU'} slot(s)" + (f" of {per_job}" if gpu else "")
             if options.executor == "local" else f"{options.executor} ({per_job})" if gpu else options.executor)
    print(f"batch: {len(submissions)} submission(s) in {options.export}; {len(submissions) - len(todo)} already "
          f"graded with kit {version}; {len(todo)} to grade on {where}", flush=True)
    if options.executor == "local" and not gpu:
        print("batch: no GPU here: each grade leaves out the points of its GPU-only tests, and this batch writes "
              "no scores.csv for upload unless --partial asks for one", flush=True)
    if options.dry_run:
        for job in todo:
            print("  " + shlex.join(job.argv))
        if options.executor == "slurm":
            print("batch: --dry-run: the sbatch script of the job array:\n")
            print(slurm_script(out / "slurm", options.slurm, max(1, len(todo))))
        return 0
    for job in todo:
        for stale in ("results.json", "batch.json"):
            (Path(job.log).parent / stale).unlink(missing_ok=True)

    progress = Progress("grades")
    if options.executor == "local":
        def run(jobs):
            return run_local(jobs, devices, _judge, progress)
    else:
        cluster = {"slurm": "slurm", "submitit-local": "local", "submitit-debug": "debug"}[options.executor]

        def run(jobs):
            return run_submitit(jobs, out / "slurm", cluster, options.slurm, _judge, progress,
                                poll_s=options.poll_s or (2.0 if cluster != "slurm" else 15.0), gpus=gpu)
    batch = run_with_retry(todo, run, _judge)
    for job in todo:
        outcome = batch.outcomes.get(job.key)
        record = {**keys[job.key], "status": "failed" if job.key in batch.failures else "done",
                  "attempts": batch.attempts.get(job.key, 0), "seconds": round(outcome.seconds, 1) if outcome else None,
                  "returncode": outcome.returncode if outcome else None, "host": outcome.host if outcome else "",
                  "device": outcome.device if outcome else None, "failure": batch.failures.get(job.key, "")}
        Path(job.log).parent.mkdir(parents=True, exist_ok=True)  # a job cancelled before it started made none
        (Path(job.log).parent / "batch.json").write_text(json.dumps(record, indent=1))
    graded = []
    for submission in submissions:
        folder = out / "submissions" / submission.id
        status, results = "graded", None
        if submission.id in batch.failures:
            status = f"failed: {batch.failures[submission.id]}"
        else:
            try:
                results = json.loads((folder / "results.json").read_text())
            except (OSError, ValueError):
                status = "not graded"
            else:
                why = (results.get("extra_data") or {}).get("no_test_ran")
                left = sum(ungraded_points(results).values())
                if why:
                    status = f"no test ran: {why}"
                elif left:
                    status = f"graded, but not {left:.2f} GPU points (see Ungraded Points)"
        graded.append((submission, results, status))
    ungraded = _ungraded_lines(graded, manifest)
    partial = bool(ungraded) and not options.partial
    csv_path, markdown, png = class_report(out, manifest, graded, options.problems, write_scores=not partial)
    summary = _summary(submissions, todo, batch, progress, time.monotonic() - started, where, version, graded)
    summary += ungraded
    if partial:
        summary.append(f"- scores.csv NOT written: these totals are not final. Grade on a GPU machine, or rerun "
                       f"with --partial to write a CSV of the points graded here (nothing is regraded)")
    summary += ["", f"- CSV: {csv_path}" + (" (partial: see Ungraded Points)" if ungraded else "")
                if csv_path else "- CSV: none (see above)",
                f"- histograms: {markdown}" + (f", {png}" if png else ""),
                f"- results and logs: {out / 'submissions'}/<id>/"]
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary), flush=True)
    return 1 if batch.failures else 3 if partial else 0


def _summary(submissions: list[Submission], todo: list[Job], batch, progress: Progress, seconds: float,
             where: str, version: str, graded: list[tuple]) -> list[str]:
    done = len(todo) - len(batch.failures)
    rate = done / (seconds / 3600) if seconds > 0 and done else 0.0
    retried = sum(1 for key, attempts in batch.attempts.items() if attempts > 1)
    no_test = [(submission, status) for submission, _, status in graded if status.startswith("no test ran")]
    lines = ["# Batch grade", "",
             f"- kit {version}; {len(submissions)} submissions; graded now {done}, skipped (already graded) "
             f"{len(submissions) - len(todo)}, failed {len(batch.failures)} (retried {retried}); "
             f"no test could run on {len(no_test)} (listed below, 0 points each)",
             f"- on {where}, {seconds:.0f} s wall: {rate:.1f} submissions per hour"]
    slowest = progress.slowest()
    if slowest:
        lines.append("- slowest: " + "; ".join(f"{label} {s:.0f} s" for label, s in slowest))
    for key, why in batch.failures.items():
        lines.append(f"- FAILED {key} ({progress.labels.get(key, key)}): {why}")
    for submission, status in no_test:  # 0 points each, with the reason the student sees
        lines.append(f"- NO TEST RAN {submission.id} ({submission.label}): {status.split(': ', 1)[1][:300]}")
    return lines
