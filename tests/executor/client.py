"""The harness's side of the executor: start it, call the submission through it, survive it.

Read by the root ``conftest.py`` (which hands tests a ``RemoteAdapters`` under ``--isolate``)
and by staff changing the protocol (``server.py`` is the other side). What a test sees:

- ``adapters.run_time_steps(step, ...)`` calls the adapter in the executor; plain data and
  tensors come back as copies, anything else (a class, a model) as a ``RemoteObject`` whose
  attributes and calls go back to the executor;
- a harness function passed as an argument runs in the harness when the submission calls it,
  so fakes keep their records here, where the submission cannot edit them;
- a returned tensor that has an autograd graph in the executor comes back with a stand-in
  graph: ``torch.autograd.grad(O, (Q, K, V), dO)`` sends dO over and brings dQ, dK, dV back,
  and ``saved_tensors(O)`` fetches copies of what the submission's forward saved (only when asked);
- an exception raised by the submission is raised here as the nearest built-in class, with the
  submission's traceback attached as a note; a crash, a hang or a broken reply raises
  ``ExecutorFailure`` naming what happened (and the limit, when one was hit), later calls in
  the same test raise it again at once, and the next test gets a fresh executor;
- a function marked as the Triton implementation must launch at least one ``@triton.jit``
  kernel defined in the submission's own files each time its forward runs (``launches.py``).
"""

from __future__ import annotations

import builtins
import dataclasses
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import confine

from . import provenance
from .cpu_clock import WALL_FACTOR, Budget
from .triton_source import kernels_in_directory
from .wire import Closed, Codec, ProtocolError, TimedOut, recv_frame, send_frame

RUNTIME_PACKAGE = "cs336_executor"
# Binds no kit name in __main__. It first takes the executor's identity (confine/identity.py: a
# network namespace of its own, then the leased user), as its last argument says, before importing torch.
_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "__import__('confine.identity', fromlist=['enter']).enter(*__import__('json').loads(sys.argv[-1])); "
              f"__import__('{RUNTIME_PACKAGE}.server', fromlist=['main']).main(sys.argv[2:-1])")
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "MPLBACKEND", "OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS",
               "TRITON_INTERPRET", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "CS336_GRADER_RUN",
               "CS336_INTERPRET_AUTOTUNE_CONFIG")
_PASSED_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")
_LIMIT_NAMES = {"SIGXCPU": "cpu_s", "SIGXFSZ": "fsize_bytes"}
_START_TIMEOUT_S = 120.0
REPLY_BASE_BYTES = 64 << 20  # what any reply may hold, besides twice the largest request of its test


def reply_limit(request_bytes: int) -> int:
    """The largest reply (or callback) frame the harness reads, given the largest request frame of
    the test so far: outputs, saved tensors and gradients are at most about twice the inputs that
    made them; a larger frame fails the call unread."""
    return REPLY_BASE_BYTES + 2 * request_bytes


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
    transform: Callable[[str], str] | None = None  # rewrites each .py file of the copy (provenance.py)


def _describe_limit(name: str, value: int | None) -> str:
    if value is None:
        return ""
    if name == "as_bytes":
        return f"the address-space limit of {value / 2**30:.0f} GiB"
    if name == "cpu_s":
        return f"the CPU-time limit of {value} s"
    if name == "fsize_bytes":
        return f"the file-size limit of {value / 2**20:.0f} MiB"
    return f"the limit of {value} processes and threads"


class Executor:
    """One executor process at a time for this harness; restarted after it fails (see the module docstring)."""

    def __init__(self, settings: ExecutorSettings):
        self.settings = settings
        self.process: subprocess.Popen | None = None
        self.generation = 0
        self.failure: str | None = None  # why the executor failed during the current test
        self.timing = False  # the current test reads timings: autotuners tune for real (begin_test)
        self.deadline: float | None = None  # the wall-clock backstop of the current test
        self.budget: Budget | None = None  # the current test's time (cpu_clock.Budget)
        self.fresh_after_test = False  # Triton failed in this test: the next test gets a new process
        self._stopped_for_freshness = False
        self._caches_suspect = False
        self.launches: list[tuple[str, str]] = []
        self._to, self._from = -1, -1
        self._callbacks: dict[int, Any] = {}
        self._released_handles: list[int] = []
        self._released_graphs: list[int] = []
        self._inputs: list[torch.Tensor] = []
        self._kernels: dict[str, set[str]] | None = None
        self._provenance = None  # provenance.Verdict, once established
        self._sent_max = 0  # the largest request frame of the current test (bytes)
        self.greeting: dict = {}  # what the executor said at its start: pid, uid, network_confined
        self.codec = Codec(export=self._export, imports={"H": self._handle}, on_tensor=self._arrived)
        self._prepared = False
        self._log_start = 0

    # -- the process ---------------------------------------------------------------------

    def _prepare(self) -> None:
        work = self.settings.workdir
        for sub in ("home", "tmp", "cache"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        runtime = work / "runtime" / RUNTIME_PACKAGE
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.copytree(Path(__file__).resolve().parent, runtime, ignore=shutil.ignore_patterns("__pycache__"))
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
        if self.settings.transform is not None:
            for path in copy.rglob("*.py"):
                path.write_text(self.settings.transform(path.read_text(errors="replace")))
        self._kernels = kernels_in_directory(copy)
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
        self._prepared = True

    def _env(self) -> dict[str, str]:
        work = self.settings.workdir
        env = {name: value for name, value in os.environ.items()
               if name in _PASSED_ENV or name.startswith(_PASSED_PREFIXES)}
        env.update({
            "HOME": str(work / "home"), "TMPDIR": str(work / "tmp"), "USER": "executor", "LOGNAME": "executor",
            "XDG_CACHE_HOME": str(work / "cache"), "TRITON_HOME": str(work / "home"),
            "TRITON_CACHE_DIR": str(work / "cache" / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(work / "cache" / "inductor"),
            "MPLCONFIGDIR": str(work / "cache" / "matplotlib"), "PYTHONDONTWRITEBYTECODE": "1",
        })
        return env

    def start(self, wait: bool = True) -> None:
        """Start a fresh executor and wait until it answers (its start-up is never charged to a test);
        ``wait=False`` only starts it, so that it imports torch while the harness does something else."""
        if self.process is not None:
            return
        began = time.monotonic()
        self._spawn()
        if not wait:
            return
        try:
            send_frame(self._to, {"op": "hello"})
            reply = recv_frame(self._from, began + _START_TIMEOUT_S, 1 << 20)
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
                [self.settings.python, "-I", "-B", "-c", _BOOTSTRAP, str(work / "runtime"), str(work / "submission"),
                 str(to_read), str(from_write), json.dumps(self.settings.limits), json.dumps(identity)],
                cwd=work / "home", env=self._env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(to_read, from_write), start_new_session=True, umask=0o077,
            )
        finally:
            log.close()
            os.close(to_read)
            os.close(from_write)
        self.generation += 1
        self._released_handles.clear()
        self._released_graphs.clear()

    def stop(self) -> None:
        """Kill the executor and everything it started."""
        if self.process is None:
            return
        if self.budget is not None:
            self.budget.cpu()  # what it used so far stays charged to the test after a restart
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
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
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        limit = _LIMIT_NAMES.get(name)
        if limit:
            return f"(the process was killed by {name}: it went past {_describe_limit(limit, self.settings.limits.get(limit))})"
        hint = {"SIGSEGV": "a segmentation fault", "SIGKILL": "killed, often for using too much memory",
                "SIGABRT": "aborted", "SIGBUS": "a bus error", "SIGFPE": "an arithmetic error"}.get(name, name)
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

    # -- tests ---------------------------------------------------------------------------

    def begin_test(self, timing: bool = False) -> None:
        """Called before each test: a new time budget, no failure yet, no launches yet.
        ``timing``: the test's verdict reads timings, so the submission's autotuners tune for real
        (``autotune.py``); otherwise each keeps the first config that launches."""
        self.timing = timing
        self.failure = None
        self.launches = []
        self._sent_max = 0
        timeout = self.settings.test_timeout_s
        self.budget = None
        if timeout is not None:
            wall = self.settings.wall_timeout_s or WALL_FACTOR * timeout
            self.budget = Budget(timeout, wall, lambda: self.process.pid if self.process is not None else None)
        self.deadline = None if self.budget is None else self.budget.wall_deadline()

    def end_test(self) -> None:
        """Called after each test (in its teardown). After a test in which Triton raised, the
        executor is stopped: Triton's interpreter patches ``triton.language`` for the whole process
        while a kernel runs, and a failure can leave the patches behind (later tests then fail with
        errors such as "zeros() takes 1 positional argument but 1 was given"), so the next test
        gets a fresh process (started between tests, never charged to a test)."""
        self.deadline = None
        self.budget = None
        if self.fresh_after_test:
            self.fresh_after_test = False
            self.stop()
            self._stopped_for_freshness = True

    def restart_if_failed(self) -> None:
        """When the executor failed, start the next one now. The grader's plugin calls this after a
        test's verdict is sent, so that no test's time limit pays for the start-up; otherwise the
        next call starts it (and its start-up is not charged to that test's budget either)."""
        fresh, self._stopped_for_freshness = self._stopped_for_freshness, False
        if (self.failure is not None or fresh) and self.process is None:
            try:
                self.start()
            except ExecutorFailure:
                pass  # the next test reports it

    # -- values --------------------------------------------------------------------------

    def _export(self, obj: Any) -> list:
        if isinstance(obj, RemoteObject):
            obj._check(self)
            return ["R", obj._id]
        if callable(obj):
            callback_id = len(self._callbacks) + 1
            self._callbacks[callback_id] = obj
            return ["C", callback_id, str(getattr(obj, "__name__", "callback"))]
        raise TypeError(f"cannot pass a {type(obj).__name__} to the submission's process: only plain data, "
                        "tensors, functions and objects that came from it can cross")

    def _handle(self, node: list) -> RemoteObject:
        if len(node) != 3 or type(node[1]) is not int or type(node[2]) is not dict:
            raise ProtocolError("a malformed handle")
        info = {key: node[2].get(key) for key in ("type", "name", "callable")}
        return RemoteObject(self, node[1], info)

    def _arrived(self, tensor: torch.Tensor, requires_grad: bool, graph: Any) -> torch.Tensor:
        if graph is None:
            return tensor.requires_grad_(requires_grad and tensor.is_floating_point())
        if type(graph) is not dict or type(graph.get("id")) is not int:
            raise ProtocolError("a malformed graph record")
        inputs = [t for t in self._inputs if t.requires_grad]
        link = _GraphLink(self, graph["id"], self.generation, len(inputs), self._tag)
        if not inputs or not torch.is_grad_enabled():
            weakref.finalize(tensor, self._released_graphs.append, graph["id"])
            return tensor
        output = _ExecutorGraph.apply(link, [tensor], *inputs)
        weakref.finalize(output, self._released_graphs.append, graph["id"])
        return output

    def _encode_args(self, args: Any) -> Any:
        self._inputs = []
        original = self.codec.encode_tensor

        def note_tensor(tensor: torch.Tensor):
            self._inputs.append(tensor)
            return original(tensor)

        self.codec.encode_tensor = note_tensor
        try:
            return self.codec.encode(args)
        finally:
            self.codec.encode_tensor = original

    # -- requests ------------------------------------------------------------------------

    def request(self, message: dict, tag: str | None = None, reply_bytes: int = 0) -> Any:
        """Send ``message`` (values already encoded), serve callbacks, return the decoded reply.

        ``reply_bytes``: a larger reply limit than ``reply_limit`` gives, for requests the harness
        knows return more (a probe's ``reply_bytes``)."""
        if self.failure is not None:
            raise ExecutorFailure(f"not run: {self.failure.splitlines()[0]} (earlier in this test)")
        if self.budget is not None and self.budget.expired():
            raise self._fail(self._timeout_message())
        self.start()
        message["release"] = {"handles": self._released_handles[:], "graphs": self._released_graphs[:]}
        if self.timing:
            message["autotune"] = "full"
        self._released_handles.clear()
        self._released_graphs.clear()
        try:
            self._sent_max = max(self._sent_max, send_frame(self._to, message))
            limit = max(reply_limit(self._sent_max), reply_bytes)
            while True:
                self._await_reply()
                reply = recv_frame(self._from, self._wait_until(), limit)
                if not isinstance(reply, dict):
                    raise ProtocolError("a reply that is not a dict")
                if "callback" in reply:
                    self._serve_callback(reply)
                    continue
                break
        except (Closed, BrokenPipeError):
            raise self._fail("the process running the submission died", died=True) from None
        except TimedOut:
            raise self._fail(self._timeout_message() if self.budget is not None else
                             "timed out: the submission's process did not start") from None
        except ProtocolError as error:
            raise self._fail(f"the process running the submission sent a malformed reply ({error})") from None
        launches = reply.get("launches") or []
        if not (isinstance(launches, list) and all(isinstance(x, list) and len(x) == 2 and all(isinstance(v, str) for v in x)
                                                   for x in launches)):
            raise self._fail("the process running the submission sent a malformed launch record")
        self.launches += [tuple(x) for x in launches]
        if "error" in reply:
            if _triton_failure(reply["error"]):
                self.fresh_after_test = True
            raise _stand_in(reply["error"], self.settings.limits)
        self._tag = tag
        try:
            value = self.codec.decode(reply.get("ok"))
        except ProtocolError as error:
            raise self._fail(f"the process running the submission sent a malformed value ({error})") from None
        finally:
            self._tag = None
        if tag == "triton" and message.get("op") in ("call", "probe") and _holds_tensor(value):
            provenance.check_triton_call(self.triton_provenance(), self._kernels or {}, launches, reply.get("aten"))
        return value

    _tag: str | None = None

    def _wait_until(self) -> float:
        if self.budget is not None:
            return self.budget.wall_deadline()
        return time.monotonic() + _START_TIMEOUT_S * 10

    def _await_reply(self) -> None:
        """Return once the executor has started to answer; raise TimedOut when the test's budget
        (CPU time, or the wall-clock backstop) runs out first. Checked about once a second."""
        while self.budget is not None:
            if self.budget.expired():
                raise TimedOut("the test's time ran out")
            left = self.budget.wall_deadline() - time.monotonic()
            if select.select([self._from], [], [], max(0.0, min(1.0, left)))[0]:
                return

    def _timeout_message(self) -> str:
        budget = self.budget
        wall, cpu = budget.wall(), budget.cpu()
        if wall >= budget.wall_limit_s and (cpu is None or cpu < budget.limit_s):
            return (f"timed out: the submission was still running after {wall:.0f} s on the clock, the most any "
                    f"test may wait (it used {cpu if cpu is not None else wall:.0f} s of CPU time: it was waiting "
                    "on something, such as a lock, a sleep, a pipe or a process that never answers)")
        return (f"timed out: the submission was still running after {budget.limit_s:.0f} s "
                f"(counted as CPU time, {cpu if cpu is not None else wall:.0f} s, and {wall:.0f} s on the clock)")

    def _serve_callback(self, message: dict) -> None:
        callback = self._callbacks.get(message.get("callback"))
        try:
            if callback is None:
                raise LookupError(f"no callback {message.get('callback')!r}")
            args = self.codec.decode(message.get("args"))
            kwargs = self.codec.decode(message.get("kwargs"))
            reply = {"op": "return", "value": self.codec.encode(callback(*args, **kwargs))}
        except ProtocolError:
            raise
        except Exception as error:  # noqa: BLE001  a fake that raises: the submission sees the error
            base = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
            reply = {"op": "raise", "error": {"base": base, "message": str(error)}}
        send_frame(self._to, reply)

    def triton_provenance(self):
        """The harness's verdict on whether the submission's Triton kernels compute the attention
        (``provenance.py``): established once per process, and once per grade through a cache that
        only the harness's user can write."""
        if self._provenance is not None:
            return self._provenance
        device = "cuda" if torch.cuda.is_available() else "cpu"
        cache = None
        if self.settings.uid is not None:  # the grader: harnesses of one grade share the verdict
            folder = self.settings.workdir.parent / ".triton-provenance"
            folder.mkdir(mode=0o700, exist_ok=True)
            cache = folder / f"{provenance.cache_key(self.settings.submission, device)}.json"
        lock = None
        if cache is not None:
            lock = os.open(cache.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)  # a harness of this grade may be establishing it now
        try:
            if cache is not None and cache.is_file() and cache.stat().st_uid == os.getuid():
                self._provenance = provenance.Verdict.from_json(cache.read_text())
                return self._provenance
            return self._establish_provenance(cache, device)
        finally:
            if lock is not None:
                os.close(lock)

    def _establish_provenance(self, cache: Path | None, device: str):
        began = time.monotonic()
        saved = (self.launches, self._tag, self.failure)
        work = self.settings.workdir

        def stripped_settings(transform):
            return dataclasses.replace(self.settings, workdir=work.with_name(work.name + "-stripped"), transform=transform)

        try:
            verdict = provenance.prove(self, stripped_settings, device)
        finally:
            self.launches, self._tag = saved[0], saved[1]
            if self.budget is not None:  # the check is the grader's cost, not the test's
                self.budget.exclude(time.monotonic() - began)
                self.deadline = self.budget.wall_deadline()
        if self.failure is not None and saved[2] is None:
            self.failure = None  # the executor died during the check; the next call restarts it
        self._provenance = verdict
        if cache is not None:
            temporary = cache.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(verdict.to_json())
            os.replace(temporary, cache)
        return verdict

    def call(self, target: int | str, attr: str | None, args: tuple, kwargs: dict, tag: str | None = None) -> Any:
        encoded = self._encode_args([list(args), kwargs])
        return self.request({"op": "call", "target": target, "attr": attr, "args": encoded[1][0],
                             "kwargs": encoded[1][1], "grad": torch.is_grad_enabled(), "watch": tag == "triton"}, tag)

    def probe(self, name: str, *args, tag: str | None = None, **kwargs) -> Any:
        from .probes import find  # the harness's own copy: its reply limit is read here, not in the executor

        encoded = self._encode_args([list(args), kwargs])
        return self.request({"op": "probe", "name": name, "args": encoded[1][0], "kwargs": encoded[1][1],
                             "grad": torch.is_grad_enabled()}, tag, getattr(find(name), "reply_bytes", 0))

    def getattr(self, target: int, name: str, tag: str | None) -> Any:
        return self.request({"op": "getattr", "target": target, "name": name}, tag)

    def saved_tensors(self, link: _GraphLink) -> tuple[torch.Tensor, ...]:
        """Copies of what the executor's graph node behind ``link`` saved for its backward."""
        if link.generation != self.generation:
            raise ExecutorFailure("the submission's process was restarted since this output was computed")
        saved = self.request({"op": "saved", "graph": link.graph_id})
        if not isinstance(saved, list) or not all(isinstance(t, torch.Tensor) for t in saved):
            raise ExecutorFailure("the submission's process sent saved tensors that are not tensors")
        return tuple(saved)

    def backward(self, link: _GraphLink, grad: torch.Tensor) -> list:
        if link.generation != self.generation:
            raise ExecutorFailure("the submission's process was restarted since this output was computed")
        self._inputs = []
        grads = self.request({"op": "backward", "graph": link.graph_id, "grad": self.codec.encode(grad)})
        if not isinstance(grads, list) or len(grads) != link.n_inputs or not all(
                g is None or isinstance(g, torch.Tensor) for g in grads):
            raise ExecutorFailure(f"the backward sent {type(grads).__name__} instead of {link.n_inputs} gradients")
        return grads


def recorded_launches(obj: Any) -> list[tuple[str, str]] | None:
    """The launches of the submission's ``@triton.jit`` kernels recorded so far in this test by
    the executor that holds ``obj`` (a copy), or None when ``obj`` lives in this process."""
    if isinstance(obj, RemoteObject):
        return list(obj._executor.launches)
    return None


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


COMPILE_CACHES = ("inductor", "triton", "torch")


def wipe_compile_caches(cache: Path) -> None:
    """Empty the torch.compile and Triton caches under ``cache``. Called before an executor starts
    in place of one that was killed or died: a process killed while compiling can leave a
    half-written file there (inductor writes its shared libraries in place), which the next one
    would load ("file too short"). The next process recompiles instead."""
    for name in COMPILE_CACHES:
        shutil.rmtree(cache / name, ignore_errors=True)


def _triton_failure(error: Any) -> bool:
    """Whether an error the submission raised went through Triton (its traceback names a file of
    the triton package, or a Triton error class): the process may be left in a state that
    breaks later tests (see ``Executor.end_test``)."""
    if not isinstance(error, dict):
        return False
    trace = str(error.get("traceback", ""))
    kind = str(error.get("type", ""))
    return kind.startswith("triton.") or "/triton/" in trace or "InterpreterError" in trace


def _stand_in(error: Any, limits: dict[str, int | None] | None = None) -> BaseException:
    """The harness's copy of an exception the submission raised: a built-in class, never the submission's."""
    if not isinstance(error, dict):
        return ExecutorFailure("the process running the submission sent a malformed error")
    base, message = str(error.get("base")), str(error.get("message", ""))
    kind = str(error.get("type", base))
    if base == "SystemExit":
        code = error.get("code")
        stand_in: BaseException = SystemExit(code if isinstance(code, int) else message or None)
    elif base == "OutOfMemoryError":
        stand_in = torch.OutOfMemoryError(message)
    else:
        cls = getattr(builtins, base, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = RuntimeError
        try:
            stand_in = cls(message)
        except Exception:  # noqa: BLE001  classes whose constructor wants other arguments
            stand_in = RuntimeError(message)
        if isinstance(stand_in, MemoryError) or "MemoryError" in kind:
            limit = _describe_limit("as_bytes", (limits or {}).get("as_bytes"))
            stand_in.add_note("The submission ran out of memory" + (f": it went past {limit} that the grader "
                              "gives the process running it" if limit else "") + ".")
    trace = str(error.get("traceback", ""))
    if trace:
        stand_in.add_note(f"raised in the submission's process ({kind}):\n{trace.rstrip()}")
    return stand_in


@dataclass(frozen=True)
class _GraphLink:
    executor: Executor
    graph_id: int
    generation: int
    n_inputs: int
    tag: str | None


def saved_tensors(output: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    """What the submission's forward saved for ``output``'s backward, if ``output`` came from the executor; else None."""
    link = getattr(output.grad_fn, "link", None)
    if not isinstance(link, _GraphLink):
        return None
    return link.executor.saved_tensors(link)


class _ExecutorGraph(torch.autograd.Function):
    """A stand-in node: its backward asks the executor for the gradients of the real graph."""

    @staticmethod
    def forward(ctx, link: _GraphLink, box: list, *inputs):
        ctx.link = link
        return box[0]

    @staticmethod
    def backward(ctx, grad):
        grads = ctx.link.executor.backward(ctx.link, grad)
        return (None, None, *grads)


class RemoteObject:
    """An object that stays in the executor: attributes and calls go there and come back as copies."""

    __slots__ = ("_executor", "_id", "_info", "_generation", "_tag", "__weakref__")

    def __init__(self, executor: Executor, handle: int, info: dict, tag: str | None = None):
        object.__setattr__(self, "_executor", executor)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_info", info)
        object.__setattr__(self, "_generation", executor.generation)
        object.__setattr__(self, "_tag", tag or executor._tag)
        weakref.finalize(self, executor._released_handles.append, handle)

    def _check(self, executor: Executor) -> None:
        if executor is not self._executor or self._generation != executor.generation:
            raise ExecutorFailure(f"{self!r} belongs to a process of the submission that has since been restarted; "
                                  "get it again from adapters")

    @property
    def __name__(self) -> str:
        return self._info.get("name") or self._info.get("type", "object").rsplit(".", 1)[-1]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._check(self._executor)
        return self._executor.getattr(self._id, name, self._tag)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r} on an object of the submission's process")

    def __call__(self, *args, **kwargs) -> Any:
        self._check(self._executor)
        return self._executor.call(self._id, None, args, kwargs, self._tag)

    def __repr__(self) -> str:
        return f"<{self._info.get('type')} {self._info.get('name') or ''} in the submission's process>"


class RemoteAdapters:
    """The submission's ``adapters`` module, as seen from the harness: ``adapters.<name>(...)`` runs there."""

    TRITON_ADAPTERS = frozenset({"get_flashattention_autograd_function_triton"})

    def __init__(self, executor: Executor):
        self._executor = executor

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        executor = self._executor
        tag = "triton" if name in self.TRITON_ADAPTERS else None

        def call_adapter(*args, **kwargs):
            return executor.call(name, None, args, kwargs, tag)

        call_adapter.__name__ = name
        return call_adapter

    def probe(self, name: str, *args, tag: str | None = None, **kwargs) -> Any:
        """Run the kit's probe ``name`` (see tests/executor/probes/) next to the submission."""
        return self._executor.probe(name, *args, tag=tag, **kwargs)
