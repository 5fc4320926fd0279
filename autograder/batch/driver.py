"""The one batch driver: a job per submission, run where the user chose, resumed, retried, summed up.

Read by staff who run a class through a batch, and by whoever writes a new batch. Two batches
use it: ``python -m autograder batch`` (grading.py: a grade per submission) and ``python -m
leaderboard batch`` (leaderboard/batch.py: a timing per submission). Each gives the driver its
``Task`` list (a ``Job`` and the key that decides whether an earlier result still stands), its
judge (did a job leave a result?) and its ``Wording``; ``drive`` then does the same steps for both:

0. check the interpreter each job's command starts (its ``argv[0]``): one that cannot import the
   kit's stack stops the batch (exit status 2, one line naming the interpreter to use) before a
   job is queued (harness/interpreter.py);
1. resume: skip each task whose folder holds a ``batch.json`` that says done, with the same key,
   beside readable outputs;
2. say the plan on the console (``--dry-run``: print each command, and for Slurm the sbatch
   script, then stop);
3. run the rest where ``Cluster`` says (this machine's slots, or submitit's Slurm, local or
   debug executors: executors.py), polling their states, and retry the failed ones once;
4. collect: hand each task that succeeded to the batch's ``collect``, and write each task's
   ``batch.json`` (its key, status, attempts, seconds, exit status, host, device, failure).

The batch then writes its own report and calls ``summary_lines``/``write_summary``, the one
writer of a ``summary.md`` (counts, throughput, the slowest, the failures, then the batch's own
lines), which the leaderboard's self-test uses too. ``version_hash`` is the one definition of
"the version of the code that decides a result". ``add_flags`` defines the flags both batches
share, once, and ``cluster_from_flags`` reads them back.

``--cluster`` (formerly ``--executor``, which still works) names where the jobs run. The new name
keeps "executor" for one thing only: the untrusted process that runs a submission's code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autograder.batch.executors import (
    BatchRun,
    Job,
    Judge,
    Progress,
    SlurmParams,
    local_devices,
    run_local,
    run_submitit,
    run_with_retry,
    slurm_script,
)
from harness.interpreter import EXIT_WRONG_PYTHON, stack_missing, wrong_python_line

CLUSTERS = ("local", "slurm", "submitit-local", "submitit-debug")
SUBMITIT = {"slurm": "slurm", "submitit-local": "local", "submitit-debug": "debug"}  # --cluster -> submitit's name
RECORD = "batch.json"  # in each task's folder: what resumption reads


def version_hash(root: Path, patterns: Iterable[str]) -> str:
    """A short hash of the files under ``root`` that match the glob ``patterns``: each file's path
    relative to ``root`` and its bytes (``__pycache__`` left out). A result recorded under another
    hash was made by other code, and a rerun makes it again."""
    root = Path(root)
    digest = hashlib.sha256()
    files = sorted({path for pattern in patterns for path in root.glob(pattern)
                    if path.is_file() and "__pycache__" not in path.parts})
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Cluster:
    """Where a batch's jobs run. ``name`` is one of CLUSTERS: ``local`` runs one job per slot of
    ``devices`` (``local_devices``: GPU groups, or CPU slots as None); the others go through
    submitit with ``slurm``'s parameters. ``gpus`` says whether a job gets GPUs; ``poll_s`` is the
    time between looks at submitted jobs (None: 15 s on Slurm, where each look asks sacct; else 2 s)."""

    name: str
    devices: tuple[str | None, ...] = ()
    gpus: bool = True
    gpus_per_job: int = 1
    slurm: SlurmParams = field(default_factory=SlurmParams)
    poll_s: float | None = None

    @classmethod
    def choose(cls, name: str, gpus: str = "auto", jobs: int = 2, gpus_per_job: int = 1,
               slurm: SlurmParams | None = None, poll_s: float | None = None, cluster_gpus: bool = True) -> Cluster:
        """The cluster for ``name``: for ``local``, this machine's slots from ``gpus`` and ``jobs``
        (executors.SlotError when it has GPUs but fewer than ``gpus_per_job``); for the others,
        jobs that get GPUs when ``cluster_gpus``."""
        slurm = slurm or SlurmParams()
        if name == "local":
            devices = tuple(local_devices(gpus, jobs, gpus_per_job))
            return cls(name, devices, devices[0] is not None, gpus_per_job, slurm, poll_s)
        if name not in SUBMITIT:
            raise ValueError(f"unknown cluster {name!r}: expected one of {', '.join(CLUSTERS)}")
        return cls(name, (), cluster_gpus, gpus_per_job, slurm, poll_s)

    def describe(self) -> str:
        """Where the jobs run, for the console and summary.md."""
        per_job = f"{self.gpus_per_job} GPU{'s' * (self.gpus_per_job != 1)} a job"
        if self.name == "local":
            slots = f"this machine, {len(self.devices)} {'GPU' if self.gpus else 'CPU'} slot(s)"
            return slots + (f" of {per_job}" if self.gpus else "")
        return f"{self.name} ({per_job})" if self.gpus else self.name

    def runner(self, folder: Path, judge: Judge, progress: Progress) -> Callable[[list[Job]], list]:
        """A function that runs a list of jobs here and returns their outcomes (for run_with_retry)."""
        if self.name == "local":
            return lambda jobs: run_local(jobs, list(self.devices), judge, progress)
        cluster = SUBMITIT[self.name]
        poll_s = self.poll_s or (15.0 if cluster == "slurm" else 2.0)
        return lambda jobs: run_submitit(jobs, folder, cluster, self.slurm, judge, progress, poll_s=poll_s,
                                         gpus=self.gpus)


@dataclass(frozen=True)
class Task:
    """One submission's job, and ``key``: what decides its result (the code's version, the
    submission's hash, the flags). The job's folder (its log's) holds its outputs and batch.json;
    an earlier result there with the same key stands."""

    job: Job
    key: dict

    @property
    def folder(self) -> Path:
        return Path(self.job.log).parent


@dataclass(frozen=True)
class Wording:
    """How a batch speaks of itself: ``command`` starts its console lines, ``title`` heads its
    summary.md; one job ``verb``s a submission (``grade``), a done one is ``done`` (``graded``);
    ``noun`` counts jobs in progress lines (``grades``); ``version`` is what the version hashes."""

    command: str
    title: str
    verb: str
    done: str
    noun: str
    version: str


@dataclass
class Ran:
    """What ``drive`` did: every task, the ones it ran, their outcomes and the wall time so far."""

    tasks: list[Task]
    todo: list[Task]
    run: BatchRun
    progress: Progress
    cluster: Cluster
    started: float

    def failures(self) -> list[tuple[str, str]]:
        """(``key (label)``, why) of each task that failed twice."""
        return [(f"{key} ({self.progress.labels.get(key, key)})", why) for key, why in self.run.failures.items()]

    def tally(self, version: str = "") -> Tally:
        return Tally(total=len(self.tasks), done=len(self.todo) - len(self.run.failures), failed=self.failures(),
                     seconds=time.monotonic() - self.started, where=self.cluster.describe(),
                     slowest=self.progress.slowest(), skipped=len(self.tasks) - len(self.todo),
                     retried=sum(1 for attempts in self.run.attempts.values() if attempts > 1), version=version)


def _readable(path: Path) -> None:
    """Raise OSError or ValueError unless ``path`` reads as JSON (``.jsonl``: a JSON value a line)."""
    text = path.read_text(encoding="utf-8")
    for chunk in text.splitlines() if path.suffix == ".jsonl" else [text]:
        if chunk.strip() or path.suffix != ".jsonl":
            json.loads(chunk)


def already_done(task: Task, outputs: Sequence[str] = ()) -> bool:
    """Whether the task's folder holds a result of the same key: batch.json says done with that
    key, and each of ``outputs`` reads as JSON."""
    try:
        record = json.loads((task.folder / RECORD).read_text())
        for name in outputs:
            _readable(task.folder / name)
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and record.get("status") == "done"
            and all(record.get(name) == value for name, value in task.key.items()))


def drive(tasks: list[Task], cluster: Cluster, out: Path, judge: Judge, wording: Wording, *, version: str,
          outputs: Sequence[str] = (), collect: Callable[[Task], None] | None = None, dry_run: bool = False,
          source: str = "", notes: Sequence[str] = ()) -> Ran | None:
    """Run ``tasks`` (steps 1 to 4 of the module's docstring); None after a dry run. ``outputs``:
    the files a job leaves in its folder (checked on resumption, removed before it runs again);
    ``collect``: called with each task that succeeded, before its batch.json is written;
    ``source`` (`` in EXPORT``) and ``notes`` (more console lines) complete the plan's lines."""
    started = time.monotonic()
    for python in sorted({task.job.argv[0] for task in tasks}):
        missing = stack_missing(python)
        if missing:  # every job would fail, and be retried, on a Python without the kit's stack
            print(wrong_python_line(f"{wording.command}: the jobs' interpreter", python, missing),
                  file=sys.stderr, flush=True)
            raise SystemExit(EXIT_WRONG_PYTHON)
    todo = [task for task in tasks if not already_done(task, outputs)]
    print(f"{wording.command}: {len(tasks)} submission(s){source}; {len(tasks) - len(todo)} already {wording.done} "
          f"with {wording.version} {version}; {len(todo)} to {wording.verb} on {cluster.describe()}", flush=True)
    for note in notes:
        print(f"{wording.command}: {note}", flush=True)
    if dry_run:
        for task in todo:
            print("  " + shlex.join(task.job.argv))
        if cluster.name == "slurm":
            print(f"{wording.command}: --dry-run: the sbatch script of the job array:\n")
            print(slurm_script(out / "slurm", cluster.slurm, max(1, len(todo))))
        return None
    for task in todo:
        for name in (*outputs, RECORD):
            (task.folder / name).unlink(missing_ok=True)
    progress = Progress(wording.noun)
    run = run_with_retry([task.job for task in todo], cluster.runner(out / "slurm", judge, progress), judge)
    for task in todo:
        key = task.job.key
        failed = key in run.failures
        task.folder.mkdir(parents=True, exist_ok=True)  # a job cancelled before it started made none
        if collect is not None and not failed:
            collect(task)
        outcome = run.outcomes.get(key)
        record = {**task.key, "status": "failed" if failed else "done", "attempts": run.attempts.get(key, 0),
                  "seconds": round(outcome.seconds, 1) if outcome else None,
                  "returncode": outcome.returncode if outcome else None, "host": outcome.host if outcome else "",
                  "device": outcome.device if outcome else None, "failure": run.failures.get(key, "")}
        (task.folder / RECORD).write_text(json.dumps(record, indent=1))
    return Ran(tasks, todo, run, progress, cluster, started)


@dataclass
class Tally:
    """What a batch did, for its summary: ``done`` of ``total`` gave a result now; ``failed`` lists
    (who, why); ``skipped`` (resumed) and ``retried`` are None for a batch that does neither."""

    total: int
    done: int
    failed: list[tuple[str, str]]
    seconds: float
    where: str
    slowest: list[tuple[str, float]] = field(default_factory=list)
    skipped: int | None = None
    retried: int | None = None
    version: str = ""


def summary_lines(title: str, tally: Tally, done: str, unit: str = "submissions", head: Sequence[str] = (),
                  notes: Sequence[str] = (), body: Sequence[str] = ()) -> list[str]:
    """summary.md's lines: ``# title``, the ``head`` paragraph, then a line each for the counts, the
    throughput (results per hour of wall time), the slowest and each failure, then ``notes``
    (more list items), then ``body`` after a blank line."""
    counts = (f"{done} now {tally.done}, skipped (already {done}) {tally.skipped}" if tally.skipped is not None
              else f"{done} {tally.done}")
    counts += f", failed {len(tally.failed)}" + (f" (retried {tally.retried})" if tally.retried is not None else "")
    rate = tally.done / (tally.seconds / 3600) if tally.seconds > 0 and tally.done else 0.0
    lines = [f"# {title}", ""]
    if head:
        lines += [*head, ""]
    lines += [f"- {tally.version + '; ' if tally.version else ''}{tally.total} {unit}; {counts}",
              f"- on {tally.where}, {tally.seconds:.0f} s wall: {rate:.1f} {unit} per hour"]
    if tally.slowest:
        lines.append("- slowest: " + "; ".join(f"{label} {seconds:.0f} s" for label, seconds in tally.slowest))
    lines += [f"- FAILED {who}: {why}" for who, why in tally.failed]
    lines += notes
    if body:
        lines += ["", *body]
    return lines


def write_summary(folder: Path, lines: Sequence[str]) -> str:
    """Write ``lines`` to ``folder``/summary.md; return its text (for the console)."""
    text = "\n".join(lines) + "\n"
    (Path(folder) / "summary.md").write_text(text, encoding="utf-8")
    return text


def add_flags(parser: argparse.ArgumentParser, job_name: str) -> None:
    """The flags that ``autograder batch`` and ``leaderboard batch`` share: the export, where the
    jobs run, ``--dry-run`` and the Slurm group. ``job_name`` names the Slurm jobs."""
    parser.add_argument("export", help="Gradescope's Export Submissions zip, or the folder it unpacks to "
                        "(submission_metadata.yml and one folder a submission)")
    parser.add_argument("--cluster", "--executor", dest="cluster", choices=CLUSTERS, default="local", metavar="CLUSTER",
                        help="where the jobs run: local: this machine; slurm: a Slurm job array through submitit, one "
                             "GPU a job; submitit-local/submitit-debug: submitit's own executors (tests of the Slurm "
                             "path). --executor is its former name")
    parser.add_argument("--gpus", default="auto", help="local: GPUs to use, one job per GPU at a time: "
                        "auto (every GPU nvidia-smi lists), a count, a list like 0,2, or 0 for none (default auto)")
    parser.add_argument("--jobs", type=int, default=2, help="local without GPUs: jobs at a time (default 2)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run (and for slurm the exact sbatch script) and stop")
    parser.add_argument("--poll-s", type=float,
                        help="seconds between looks at the submitted jobs (default 15 on Slurm, which each look "
                             "asks through sacct; 2 for submitit's local executors)")
    slurm = parser.add_argument_group("slurm (with --cluster slurm)")
    slurm.add_argument("--partition", help="Slurm partition")
    slurm.add_argument("--account", help="Slurm account")
    slurm.add_argument("--qos", help="Slurm quality of service")
    slurm.add_argument("--time", type=int, default=60, help="minutes per job (default 60)")
    slurm.add_argument("--cpus", type=int, default=16, help="CPUs per job (default 16)")
    slurm.add_argument("--mem-gb", type=int, default=64, help="memory per job in GB (default 64)")
    slurm.add_argument("--array-parallelism", type=int, default=64, help="array tasks running at once (default 64)")
    slurm.add_argument("--slurm-extra", action="append", metavar="KEY=VALUE",
                       help="another sbatch option, e.g. constraint=h100 (repeatable)")
    slurm.add_argument("--slurm-setup", action="append", metavar="LINE",
                       help="a shell line each job runs first, e.g. 'module load cuda' (repeatable)")
    parser.set_defaults(job_name=job_name)


def cluster_from_flags(args: argparse.Namespace, command: str, gpus_per_job: int = 1,
                       cluster_gpus: bool = True) -> Cluster:
    """The ``Cluster`` that ``add_flags``'s flags ask for. SystemExit, naming the flag, for a
    malformed ``--slurm-extra`` or ``--poll-s``; executors.SlotError when this machine lacks the GPUs."""
    extra = []
    for item in args.slurm_extra or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{command}: --slurm-extra {item!r}: expected KEY=VALUE (an sbatch option without --)")
        extra.append((key, value))
    if args.poll_s is not None and not args.poll_s > 0:
        raise SystemExit(f"{command}: --poll-s {args.poll_s}: expected seconds above 0 (or leave it out for the "
                         "default)")
    slurm = SlurmParams(partition=args.partition, account=args.account, qos=args.qos, time_min=args.time,
                        cpus=args.cpus, mem_gb=args.mem_gb, array_parallelism=args.array_parallelism,
                        gpus=gpus_per_job, job_name=args.job_name, extra=tuple(extra),
                        setup=tuple(args.slurm_setup or ()))
    return Cluster.choose(args.cluster, args.gpus, args.jobs, gpus_per_job, slurm, args.poll_s, cluster_gpus)
