"""The executor's process: its folder, its environment and limits, its start, its stop, its death.

Read by ``client.py`` (whose ``Executor`` builds its requests on ``ExecutorProcess``) and by staff
changing how the submission's process is confined or what a crash says. The contract:

- ``ExecutorSettings`` says how to run it; ``ExecutorProcess`` runs one process at a time;
- ``start`` copies the runtime (the ``executor`` package, named ``cs336_executor`` there, and the
  confinement modules ``confine.EXECUTOR_FILES``) and the submission into ``workdir`` once, then
  starts ``executor/server.py`` (or, for a replay, ``executor/replay_server.py``:
  ``ExecutorSettings.entry``) as the leased user in a session of its own, with only the environment
  variables in ``_PASSED_ENV`` and its own home, caches and temporary folder, and waits for its
  greeting (never charged to a test);
- ``stop`` kills its whole process group; ``_fail`` stops it, remembers why and returns the
  ``ExecutorFailure`` to raise: how it died (the signal, and the limit it went past) and the last
  lines it printed;
- after a failure the compile caches are wiped before the next start (``wipe_compile_caches``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import confine
import executor
from confine.children import describe_signal, kill_group
from confine.environment import machine_env, own_folders
from executor.wire import Closed, ProtocolError, TimedOut, recv_frame, send_frame

from .cpu_clock import Budget

RUNTIME_PACKAGE = "cs336_executor"
# Binds no kit name in __main__. It first takes the executor's identity (confine/identity.py: a network namespace
# of its own, views of its interpreter, the leased user), as its last argument says, before importing torch.
_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "__import__('confine.identity', fromlist=['enter']).enter(*__import__('json').loads(sys.argv[-1])); "
              f"__import__('{RUNTIME_PACKAGE}.' + sys.argv[2], fromlist=['main']).main(sys.argv[3:-1])")
ENTRIES = ("server", "replay_server")  # the executor, and the replay process that runs only kernels (replay.py)
# Passed beside the machine's variables (confine/environment.py): the grade's settings.
_PASSED_ENV = ("MPLBACKEND", "OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "TRITON_INTERPRET", "PYTHONHASHSEED",
               "CS336_GRADER_RUN", "CS336_INTERPRET_AUTOTUNE_CONFIG")
_LIMIT_NAMES = {"SIGXCPU": "cpu_s", "SIGXFSZ": "fsize_bytes"}
START_TIMEOUT_S = 120.0


class ExecutorFailure(Exception):
    """The process running the submission died, hung, or sent something that is not a reply."""


@dataclass(frozen=True)
class ExecutorSettings:
    """How to run the executor.

    ``submission``: the directory holding adapters.py and cs336_systems/ (copied, never used in
    place); ``workdir``: a folder for the executor's copy, home, caches and log (created);
    ``uid``/``gid``: the user it runs as (None: this process's user); ``limits``: rlimits
    (``as_bytes``, ``cpu_s``, ``fsize_bytes``, ``nproc``; None leaves one unset);
    ``test_timeout_s``: how long one test may keep it busy in all, counted as the smaller of wall
    and CPU time (``cpu_clock.Budget``); ``wall_timeout_s``: the wall-clock backstop for a test
    whose code waits on nothing (None: ``WALL_FACTOR`` times ``test_timeout_s``).
    """

    submission: Path
    workdir: Path
    uid: int | None = None
    gid: int | None = None
    limits: dict[str, int | None] = field(default_factory=dict)
    test_timeout_s: float | None = None
    python: str = sys.executable
    wall_timeout_s: float | None = None
    entry: str = "server"  # the module of this package the process runs (ENTRIES)
    replay_uid: int | None = None  # the user the replay process runs as (replay.py; None: ``uid``)
    replay_cache: Path | None = None  # the replays' shared Triton cache (None: one in each replay's workdir)
    compile_cache: Path | None = None  # this process's Triton cache, if not its workdir's (a replay's: ``replay_cache``)
    extra_env: dict[str, str] = field(default_factory=dict)  # more variables for ``python`` (TRITON_INTERPRET)


def describe_limit(name: str, value: int | None) -> str:
    """How a failure names the rlimit ``name`` set to ``value`` ("the CPU-time limit of 60 s"); "" when unset."""
    if value is None:
        return ""
    if name == "as_bytes":
        return f"the address-space limit of {value / 2**30:.0f} GiB"
    if name == "cpu_s":
        return f"the CPU-time limit of {value} s"
    if name == "fsize_bytes":
        return f"the file-size limit of {value / 2**20:.0f} MiB"
    return f"the limit of {value} processes and threads"


class ExecutorProcess:
    """One executor process at a time: started on demand, restarted after it fails."""

    def __init__(self, settings: ExecutorSettings):
        self.settings = settings
        self.process: subprocess.Popen | None = None
        self.generation = 0  # counts the processes started: a handle or graph of an earlier one is stale
        self.failure: str | None = None  # why the executor failed during the current test
        self.budget: Budget | None = None  # the current test's time (cpu_clock.Budget; set by client.py)
        self.deadline: float | None = None  # the wall-clock backstop of the current test
        self.greeting: dict = {}  # what the executor said at its start: pid, uid, network_confined
        self._caches_suspect = False
        self._to, self._from = -1, -1
        self._prepared = False
        self._log_start = 0
        self._greeted = False  # the running process has answered "hello"

    def _prepare(self) -> None:
        work = self.settings.workdir
        for sub in ("home", "tmp", "cache"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        runtime = work / "runtime" / RUNTIME_PACKAGE
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.copytree(Path(executor.__file__).resolve().parent, runtime, ignore=shutil.ignore_patterns("__pycache__"))
        confined = work / "runtime" / "confine"  # the confinement modules it imports, and only those
        shutil.rmtree(confined, ignore_errors=True)
        confined.mkdir()
        for name in confine.EXECUTOR_FILES:
            shutil.copy(Path(confine.__file__).resolve().parent / name, confined / name)
        copy = work / "submission"
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir(parents=True)
        source = Path(self.settings.submission)
        shutil.copy2(source / "adapters.py", copy / "adapters.py")
        shutil.copytree(source / "cs336_systems", copy / "cs336_systems", symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # The runtime (kit code) is readable by all; the folder itself only traversable; the
        # submission's copy and the executor's folders belong to its user alone, so that no other
        # grade's executor on the host can read this student's code.
        for path in [work, *work.rglob("*")]:
            if path.is_symlink():
                continue
            public = path.is_relative_to(work / "runtime")
            if path == work:
                path.chmod(0o711)
            elif public:
                path.chmod(0o755 if path.is_dir() else 0o644)
            else:
                path.chmod(0o700 if path.is_dir() else 0o600)
                if self.settings.uid is not None:
                    os.chown(path, self.settings.uid, self.settings.gid)
        cache = self.settings.compile_cache
        if cache is not None:  # shared by the grade's replays, all of one user: made once, kept
            cache.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.settings.uid is not None and cache.stat().st_uid != self.settings.uid:
                os.chown(cache, self.settings.uid, self.settings.gid)
        self._prepared = True

    def _env(self) -> dict[str, str]:
        env = machine_env(_PASSED_ENV)
        env.update(own_folders(self.settings.workdir, "executor", self.settings.compile_cache))
        env.update(self.settings.extra_env)
        return env

    def start(self, wait: bool = True) -> None:
        """Start a fresh executor and wait until it answers (its start-up is never charged to a test);
        ``wait=False`` only starts it, so that it imports torch while the harness does something
        else: the next ``start()`` (every request makes one) then waits for its greeting."""
        began = time.monotonic()
        if self.process is None:
            self._spawn()
            self._greeted = False
        if not wait or self._greeted:
            return
        self._greeted = True
        try:
            send_frame(self._to, {"op": "hello"})
            reply = recv_frame(self._from, began + START_TIMEOUT_S, 1 << 20)
        except (Closed, BrokenPipeError, TimedOut, ProtocolError) as error:
            raise self._fail(f"the process for the submission did not start ({type(error).__name__})") from None
        if not isinstance(reply, dict) or "ok" not in reply:
            raise self._fail("the process for the submission did not start (no greeting)")
        self.greeting = reply["ok"] if isinstance(reply["ok"], dict) else {}
        if self.budget is not None:  # start-up is never charged to a test
            self.budget.exclude(time.monotonic() - began)
            self.budget.rebase()
            self.deadline = self.budget.wall_deadline()

    def _spawn(self) -> None:
        if not self._prepared:
            self._prepare()
        work = self.settings.workdir
        if self._caches_suspect:
            self._caches_suspect = False
            wipe_compile_caches(work / "cache")
        to_read, self._to = os.pipe()
        self._from, from_write = os.pipe()
        log = open(os.open(work / "executor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self._log_start = log.tell()  # what earlier executors printed is not this one's output
        identity = [self.settings.uid, self.settings.gid]
        try:
            self.process = subprocess.Popen(
                [self.settings.python, "-I", "-B", "-c", _BOOTSTRAP, str(work / "runtime"), self.settings.entry,
                 str(work / "submission"),
                 str(to_read), str(from_write), json.dumps(self.settings.limits), json.dumps(identity)],
                cwd=work / "home", env=self._env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(to_read, from_write), start_new_session=True, umask=0o077,
            )
        finally:
            log.close()
            os.close(to_read)
            os.close(from_write)
        self.generation += 1

    def stop(self) -> None:
        """Kill the executor and everything it started."""
        if self.process is None:
            return
        if self.budget is not None:
            self.budget.cpu()  # what it used so far stays charged to the test after a restart
        kill_group(self.process.pid)
        self.process.wait()
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        self.process = None

    def _fail(self, what: str, died: bool = False) -> ExecutorFailure:
        """Stop the executor and remember why. ``died``: it closed its pipe, so wait briefly for its
        exit status; otherwise (a hang) first ask it to print where each of its threads is."""
        status = None
        if died and self.process is not None:
            try:
                status = self.process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                status = None
        elif self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGUSR1)  # faulthandler in the executor prints its stacks
                self.process.wait(timeout=0.3)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.stop()
        message = what
        if status is not None:
            message += " " + self._describe_exit(status)
        tail = self.log_tail()
        if tail:
            message += "; its last output:\n" + tail
        self.failure = message
        self._caches_suspect = True  # it may have died while writing a compiled kernel
        return ExecutorFailure(message)

    def _describe_exit(self, status: int) -> str:
        if status >= 0:
            return f"(the process exited with status {status}: the code called sys.exit or os._exit, or Python aborted)"
        name, hint = describe_signal(status)
        limit = _LIMIT_NAMES.get(name)
        if limit:
            return f"(the process was killed by {name}: it went past {describe_limit(limit, self.settings.limits.get(limit))})"
        return f"(the process died with {name}: {hint})"

    def log_tail(self, lines: int = 15) -> str:
        path = self.settings.workdir / "executor.log"
        try:
            with open(path, "rb") as handle:
                handle.seek(max(self._log_start, path.stat().st_size - 16384))
                text = handle.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


COMPILE_CACHES = ("inductor", "triton", "torch")


def wipe_compile_caches(cache: Path) -> None:
    """Empty the torch.compile and Triton caches under ``cache``. Called before an executor starts
    in place of one that was killed or died: a process killed while compiling can leave a
    half-written file there (inductor writes its shared libraries in place), which the next one
    would load ("file too short"). The next process recompiles instead."""
    for name in COMPILE_CACHES:
        shutil.rmtree(cache / name, ignore_errors=True)
