"""Run one command per submission, each in its own process, on this machine or on Slurm.

Read by staff choosing where a class is graded. A ``Job`` is a command line, a working folder
and a log file; ``run_job`` runs it in a fresh process (so a grade's trust boundary holds: the
batch never imports student code) and returns an ``Outcome``. Three ways to run a list of jobs:

- ``run_local``: on this machine, one job per device slot at a time. With GPUs each slot is one
  GPU (or a group of them: ``--gpus-per-job``), named to the job by ``CUDA_VISIBLE_DEVICES``, so
  two jobs never share a GPU; without, a slot is a CPU worker (``--jobs`` of them);
- ``run_submitit``: through ``submitit``: a Slurm job array, one GPU a job or more
  (``SlurmParams``), or submitit's own ``local``/``debug`` executors (what CI uses to test
  this path);
- ``slurm_script``: the sbatch script that ``run_submitit`` would submit, for ``--dry-run``.

``run_with_retry`` runs the jobs, then the failed ones once more. ``Progress`` prints plain
lines (submitted, running, done, failed, and the slowest job) as they change and every 30 s.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import gpus as gpu_query  # the parameter `gpus` below is the --gpus option


@dataclass(frozen=True)
class Job:
    """One command for one submission. ``key`` names it (the submission's folder name)."""

    key: str
    label: str
    argv: tuple[str, ...]
    cwd: str
    log: str
    timeout_s: float
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # more environment (the course secret)


@dataclass
class Outcome:
    """How a job's process ended: ``returncode`` None when it never finished (timeout, lost job)."""

    key: str
    returncode: int | None
    seconds: float
    host: str = ""
    device: str | None = None
    error: str = ""


Judge = Callable[[Job, Outcome], "str | None"]  # None: the job succeeded; else why it failed


def run_job(job: Job, device: str | None = None) -> Outcome:
    """Run ``job`` in its own process, its output to ``job.log``; ``device`` sets CUDA_VISIBLE_DEVICES."""
    env = dict(os.environ)
    env.update(job.env)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    shown = device if device is not None else env.get("CUDA_VISIBLE_DEVICES")
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    Path(job.log).write_text("")  # then appended to: a grade appends its own lines to the same grade.log
    with open(job.log, "a") as log:
        log.write(f"$ {shlex.join(job.argv)}\n# host {socket.gethostname()}, CUDA_VISIBLE_DEVICES={shown}\n")
        log.flush()
        try:
            completed = subprocess.run(job.argv, cwd=job.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, timeout=job.timeout_s)
            code, error = completed.returncode, ""
        except subprocess.TimeoutExpired:
            code, error = None, f"ran past the batch's limit of {job.timeout_s:.0f} s and was killed"
        except OSError as failure:
            code, error = None, f"could not start: {failure}"
        if error:
            log.write(f"\n# {error}\n")
    return Outcome(job.key, code, time.monotonic() - started, socket.gethostname(), shown, error)


class Progress:
    """Plain progress lines: counts of submitted, running, done and failed jobs, and the slowest."""

    def __init__(self, what: str, every_s: float = 30.0, stream=None):
        self.what, self.every_s, self.stream = what, every_s, stream or sys.stdout
        self.started = time.monotonic()
        self.submitted: set[str] = set()
        self.running: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.lock = threading.Lock()
        self.last_line = 0.0

    def _say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {text}", file=self.stream, flush=True)

    def status(self) -> str:
        line = (f"{self.what}: submitted {len(self.submitted)}, running {len(self.running)}, "
                f"done {len(self.done)}, failed {len(self.failed)}")
        now = time.monotonic()
        if self.running:
            key, since = min(self.running.items(), key=lambda item: item[1])
            line += f"; slowest running: {self.labels.get(key, key)} ({now - since:.0f} s)"
        return line

    def submit(self, jobs: list[Job]) -> None:
        with self.lock:
            for job in jobs:
                self.submitted.add(job.key)
                self.labels[job.key] = job.label
                self.failed.pop(job.key, None)
            self._say(f"submitted {len(jobs)} job(s); " + self.status())

    def start(self, key: str, where: str = "") -> None:
        with self.lock:
            self.running[key] = time.monotonic()
            self._say(f"start {self.labels.get(key, key)}" + (f" on {where}" if where else ""))

    def finish(self, key: str, seconds: float, failure: str | None) -> None:
        with self.lock:
            self.running.pop(key, None)
            if failure is None:
                self.done[key] = seconds
                self._say(f"done  {self.labels.get(key, key)} in {seconds:.1f} s; " + self.status())
            else:
                self.failed[key] = failure
                self._say(f"FAIL  {self.labels.get(key, key)} after {seconds:.1f} s: {failure}; " + self.status())
            self.last_line = time.monotonic()

    def tick(self) -> None:
        with self.lock:
            if time.monotonic() - self.last_line >= self.every_s:
                self.last_line = time.monotonic()
                self._say(self.status())

    def slowest(self, count: int = 5) -> list[tuple[str, float]]:
        return sorted(((self.labels.get(k, k), s) for k, s in self.done.items()), key=lambda item: -item[1])[:count]


class SlotError(ValueError):
    """This machine cannot give a job the GPUs asked for (a message for the user)."""


def local_devices(gpus: str, jobs: int, per_job: int = 1) -> list[str | None]:
    """Slots for ``run_local``: groups of ``per_job`` GPU indices ("0", or "0,1" with ``per_job`` 2)
    from ``gpus`` ("auto", a count, or a list like "0,2"), or ``jobs`` CPU slots (None) when there
    is no GPU (or ``gpus`` is "0" / "none"). SlotError when there are GPUs but fewer than ``per_job``."""
    if gpus in ("0", "none", ""):
        return [None] * max(1, jobs)
    if gpus == "auto":
        # every GPU nvidia-smi lists, whatever this process's CUDA_VISIBLE_DEVICES says
        indices = [str(index) for index in range(len(gpu_query.listed()))]
        if not indices:
            return [None] * max(1, jobs)
    elif "," in gpus:
        indices = [index.strip() for index in gpus.split(",") if index.strip()]
    else:
        indices = [str(index) for index in range(int(gpus))]
    if len(indices) < per_job:
        raise SlotError(f"--gpus-per-job {per_job} needs at least {per_job} GPUs, and --gpus {gpus} gives "
                         f"{len(indices)} ({','.join(indices) or 'none'}): lower --gpus-per-job, or name more GPUs")
    return [",".join(indices[start:start + per_job]) for start in range(0, len(indices) - per_job + 1, per_job)]


def run_local(jobs: list[Job], devices: list[str | None], judge: Judge, progress: Progress) -> list[Outcome]:
    """Run ``jobs`` on this machine, one per slot of ``devices`` at a time (see ``local_devices``)."""
    queue = list(jobs)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    progress.submit(jobs)

    def worker(device: str | None) -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop(0)
            progress.start(job.key, f"GPU {device}" if device is not None else "")
            outcome = run_job(job, device)
            progress.finish(job.key, outcome.seconds, judge(job, outcome))
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(device,), daemon=True) for device in devices[: len(jobs)]]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=1.0)
        progress.tick()
    return outcomes


@dataclass(frozen=True)
class SlurmParams:
    """What each Slurm job asks for: ``gpus`` GPUs (one node; 0 for none), and these. ``extra`` are more sbatch
    options (``--slurm-extra constraint=h100``); ``setup`` are shell lines run before the job
    (modules, a container)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 60
    cpus: int = 16
    mem_gb: int = 64
    array_parallelism: int = 64
    gpus: int = 1
    job_name: str = "cs336-grade"
    extra: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()

    def sbatch(self) -> dict:
        """submitit's Slurm parameters (the names of its sbatch writer)."""
        params = {"job_name": self.job_name, "time": self.time_min, "nodes": 1, "ntasks_per_node": 1,
                  "cpus_per_task": self.cpus, "mem": f"{self.mem_gb}GB", "array_parallelism": self.array_parallelism}
        if self.gpus:  # gpus 0: CPU jobs (a CPU partition, as in autograder/selftests/local_slurm.py)
            params["gpus_per_node"] = self.gpus
        for key, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos)):
            if value:
                params[key] = value
        if self.extra:
            params["additional_parameters"] = dict(self.extra)
        if self.setup:
            params["setup"] = list(self.setup)
        return params


def slurm_script(folder: Path, params: SlurmParams, count: int) -> str:
    """The sbatch script submitit writes for an array of ``count`` jobs with ``params``."""
    from submitit.slurm.slurm import _make_sbatch_string

    command = " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))])
    return _make_sbatch_string(command=command, folder=folder, map_count=count, **params.sbatch())


def _submitit_executor(folder: Path, cluster: str, params: SlurmParams, gpus: bool):
    import submitit

    if cluster == "slurm":
        executor = submitit.SlurmExecutor(folder=folder)
        executor.update_parameters(**params.sbatch())
        return executor
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    executor.update_parameters(timeout_min=params.time_min, gpus_per_node=params.gpus if gpus else 0,
                               name=params.job_name)
    return executor


def _job_failure(handle, error: Exception) -> str:
    """One line saying why a submitit job left no result: the scheduler's last state for it
    (``CANCELLED by 0``, ``TIMEOUT``, ``NODE_FAIL``, ``OUT_OF_MEMORY``...), its error log, and the
    end of submitit's own message."""
    state = str(getattr(handle, "state", "") or "UNKNOWN")
    log = getattr(getattr(handle, "paths", None), "stderr", None)
    message = " ".join(str(error).split())
    return f"job {handle.job_id} ended {state} without a result (log: {log}): {message[-300:]}"


def run_submitit(jobs: list[Job], folder: Path, cluster: str, params: SlurmParams, judge: Judge,
                 progress: Progress, poll_s: float = 5.0, gpus: bool = True) -> list[Outcome]:
    """Run ``jobs`` as one submitit job array on ``cluster`` ("slurm", or submitit's "local" or
    "debug"); each array task runs ``run_job`` for one job. Slurm sets each task's
    ``CUDA_VISIBLE_DEVICES`` to its GPUs (``params.gpus`` of them)."""
    if not jobs:
        return []
    executor = _submitit_executor(Path(folder), cluster, params, gpus)
    handles = executor.map_array(run_job, jobs)
    progress.submit(jobs)
    pending = dict(zip([job.key for job in jobs], zip(jobs, handles)))
    outcomes: list[Outcome] = []
    started: set[str] = set()
    while pending:
        for key, (job, handle) in list(pending.items()):
            state = str(getattr(handle, "state", "")).upper()
            if key not in started and state.startswith("RUN"):
                started.add(key)
                progress.start(key, f"job {handle.job_id}")
            if not handle.done():
                continue
            if key not in started:
                progress.start(key, f"job {handle.job_id}")
            try:
                outcome = handle.result()
            except Exception as error:  # noqa: BLE001 - a lost or failed job is a failed grade, not a crash
                outcome = Outcome(key, None, 0.0, error=_job_failure(handle, error))
            progress.finish(key, outcome.seconds, judge(job, outcome))
            outcomes.append(outcome)
            del pending[key]
        progress.tick()
        if pending:
            time.sleep(poll_s)
    return outcomes


@dataclass
class BatchRun:
    """Every job's last outcome, and how many times each ran."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


def run_with_retry(jobs: list[Job], run: Callable[[list[Job]], list[Outcome]], judge: Judge) -> BatchRun:
    """Run ``jobs`` with ``run``; run the failed ones once more; report what still failed."""
    result = BatchRun()
    todo = list(jobs)
    for attempt in (1, 2):
        if not todo:
            break
        by_key = {job.key: job for job in todo}
        for outcome in run(todo):
            result.outcomes[outcome.key] = outcome
            result.attempts[outcome.key] = attempt
        todo = []
        for key, job in by_key.items():
            outcome = result.outcomes.get(key) or Outcome(key, None, 0.0, error="the job never reported")
            failure = judge(job, outcome)
            if failure is None:
                result.failures.pop(key, None)
            else:
                result.failures[key] = failure
                todo.append(job)
    return result
