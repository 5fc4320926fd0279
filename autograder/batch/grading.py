"""``python -m autograder batch EXPORT --out DIR``: grade every submission of a Gradescope export.

Read by staff grading a class. Each submission is graded by its own ``python -m autograder
grade`` process (the batch never imports student code), on this machine or on Slurm, by the
batch driver (autograder/batch/driver.py, which the leaderboard's batch uses too); this file
says what a grade job is, when it succeeded, and what the class report holds. What it writes
under ``--out``:

    submissions/<id>/results.json   the grade (Gradescope's format), as a single grade writes it
    submissions/<id>/grade.log      that grade's console output
    submissions/<id>/timeline.jsonl when each of its test processes waited, started and ended, and
                                    the CPU seconds each test was charged (grade --timeline):
                                    where a slow grade's time went
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

Every grade uses the course's secret (``secret``: from the Gradescope bundle, ``--bundle``), the
one Gradescope graded with, handed to each grade as ``$CS336_HIDDEN_SEED`` (never on a command
line or in a log): it chooses the hidden cases and every visible example, so the batch's verdicts
on tests both graded are Gradescope's. autograder/__main__.py refuses a batch without one.

A rerun skips every submission already graded with the same kit version, submission hash, grade
flags and course secret (a digest of it: autograder/bundle.py's ``secret_digest``); a grade that fails (non-zero exit, no results.json) is retried once in the same
run and then reported (and retried again by the next run).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.batch.driver import Cluster, Task, Wording, drive, summary_lines, version_hash, write_summary
from autograder.batch.executors import Job, Outcome
from autograder.batch.export import read_export
from autograder.batch.report import class_report
from autograder.bundle import secret_digest
from autograder.hidden_tests.secret import SEED_ENV
from autograder.manifest import load_manifest
from harness.submission import submission_hash

KIT = Path(__file__).resolve().parents[2]
# What decides a grade: the grader, the visible and hidden tests and what runs them, the manifest, the kit's conftest.
GRADING_FILES = ("autograder/*.py", "autograder/manifest.toml", "autograder/test_durations.toml",
                 "autograder/grader_pytest.ini", "autograder/hidden_tests/**/*", "tests/**/*.py", "harness/*.py",
                 "executor/**/*.py", "conftest.py")
SLACK_S = 600  # a grade's process may run this much past the grade's own total limit before it is killed
WORDING = Wording(command="batch", title="Batch grade", verb="grade", done="graded", noun="grades", version="kit")


@dataclass
class BatchOptions:
    """Everything ``grade_batch`` needs; autograder/__main__.py fills it from flags."""

    export: Path
    out: Path
    cluster: Cluster  # where the grades run (driver.Cluster: this machine's slots, or Slurm)
    problems: list[str] | None = None
    grade_jobs: int | None = None
    test_timeout: float | None = None
    timeout: float | None = None
    dry_run: bool = False
    partial: bool = False
    kit: Path = KIT
    secret: str = ""  # the course's secret (autograder/bundle.py's course_secret_for_batch); required


def kit_version(kit: Path = KIT) -> str:
    """A short hash of every file that decides a grade (GRADING_FILES)."""
    return version_hash(kit, GRADING_FILES)


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


def _regrade_hint(gpus_per_job: int) -> str:
    """How to grade what this batch could not: on a GPU at all, or with more GPUs a grade."""
    if gpus_per_job:
        return (f"rerun with --gpus-per-job 2 on a machine (or Slurm partition) with two GPUs a node; these tests "
                f"need more than the {gpus_per_job} GPU(s) a grade this batch gave")
    return "grade on a GPU machine (.venv/bin/python -m autograder batch EXPORT --out DIR --bundle ZIP on it)"


def _ungraded_lines(graded: list[tuple], manifest, gpus_per_job: int) -> list[str]:
    """What the batch did not grade: the problems and points left out of the totals, and how to grade
    them, or nothing. ``gpus_per_job`` is how many GPUs each grade had (0 on a CPU runner)."""
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
            f"For the final scores, {_regrade_hint(gpus_per_job)}"]


def _status(folder: Path, failure: str | None) -> tuple[str, dict | None]:
    """A submission's Status for the CSV, and its results (None when it has none)."""
    if failure:
        return f"failed: {failure}", None
    try:
        results = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return "not graded", None
    why = (results.get("extra_data") or {}).get("no_test_ran")
    left = sum(ungraded_points(results).values())
    if why:
        return f"no test ran: {why}", results
    if left:
        return f"graded, but not {left:.2f} GPU points (see Ungraded Points)", results
    return "graded", results


def grade_batch(options: BatchOptions) -> int:
    """Grade the export; write results, CSV, histograms and the summary. Exit status: 0 when every
    submission was graded, 1 when some failed twice, 2 when nothing could run, 3 when some points
    were not graded on this runner and ``partial`` was not set (no scores.csv is written)."""
    if not options.secret:
        raise ValueError("grade_batch needs the course secret (BatchOptions.secret): every grade must draw the "
                         "hidden cases and examples Gradescope drew")
    out = Path(options.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if options.cluster.name != "local":  # submitit's job files there carry each job's environment: the secret
        (out / "slurm").mkdir(mode=0o700, exist_ok=True)
    manifest = load_manifest()
    submissions = read_export(Path(options.export), out)
    cluster = options.cluster
    version = kit_version(options.kit)
    flags = _grade_flags(options, cluster.gpus)
    gpus_per_job = cluster.gpus_per_job if cluster.gpus else 0  # 0: a CPU runner
    limit = (options.timeout or manifest.settings.total_timeout_s) + SLACK_S
    tasks = []
    for submission in submissions:
        folder = out / "submissions" / submission.id
        key = {"kit_version": version, "submission_hash": submission_hash(submission.path), "grade_flags": flags,
               "gpus_per_job": gpus_per_job,  # two GPUs grade tests one cannot
               "secret_digest": secret_digest(options.secret)}  # another secret draws other cases: regrade
        argv = (sys.executable, "-m", "autograder", "grade", str(submission.path), "--out", str(folder), *flags,
                "--timeline", str(folder / "timeline.jsonl"))
        tasks.append(Task(Job(submission.id, submission.label, argv, str(options.kit), str(folder / "grade.log"),
                              limit, env=((SEED_ENV, options.secret),)), key))
    notes = []
    if cluster.name == "local" and not cluster.gpus:
        notes.append("no GPU here: each grade leaves out the points of its GPU-only tests, and this batch writes no "
                     "scores.csv for upload unless --partial asks for one")
    ran = drive(tasks, cluster, out, _judge, WORDING, version=version, outputs=("results.json", "timeline.jsonl"),
                dry_run=options.dry_run, source=f" in {options.export}", notes=notes)
    if ran is None:
        return 0
    graded = []  # (submission, results or None, status) for report.py
    for submission in submissions:
        status, results = _status(out / "submissions" / submission.id, ran.run.failures.get(submission.id))
        graded.append((submission, results, status))
    ungraded = _ungraded_lines(graded, manifest, gpus_per_job)
    partial = bool(ungraded) and not options.partial
    missing = sum(max((ungraded_points(results) for _, results, status in graded
                       if results and status.startswith("graded")), key=lambda left: sum(left.values()),
                      default={}).values())
    note = (f"PARTIAL: up to {missing:.2f} points of GPU tests were not graded on this runner, and these totals "
            "leave them out (see summary.md); submissions where no test ran are listed there, not counted here."
            if ungraded else "")
    csv_path, markdown, png = class_report(out, manifest, graded, options.problems, write_scores=not partial,
                                           note=note)
    no_test = [(submission, status) for submission, _, status in graded if status.startswith("no test ran")]
    notes = [f"- no test could run on {len(no_test)} (listed below, 0 points each)"]
    notes += [f"- NO TEST RAN {submission.id} ({submission.label}): {status.split(': ', 1)[1][:300]}"
              for submission, status in no_test]  # 0 points each, with the reason the student sees
    notes += ungraded
    if partial:
        notes.append(f"- scores.csv NOT written: these totals are not final: {_regrade_hint(gpus_per_job)}, or rerun "
                     "with --partial to write a CSV of the points graded here (nothing is regraded)")
    body = [f"- CSV: {csv_path}" + (" (partial: see Ungraded Points)" if ungraded else "") if csv_path
            else "- CSV: none (see above)",
            f"- histograms: {markdown}" + (f", {png}" if png else ""),
            f"- results and logs: {out / 'submissions'}/<id>/"]
    print(write_summary(out, summary_lines(WORDING.title, ran.tally(f"kit {version}"), WORDING.done,
                                           notes=notes, body=body)), end="", flush=True)
    return 1 if ran.run.failures else 3 if partial else 0
