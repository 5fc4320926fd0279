"""Start the processes of one data-parallel run next to the submission, and bring back what each saw.

Read by the probes of part 2 (``ddp.py``, ``optimizer_state_sharding.py``, ``fsdp.py``), which
call :func:`launch` with the name of a *job*: a function of one of this package's modules that
one rank runs (or, named by its full dotted path, a function of another module). ``launch`` starts ``world_size`` processes (from a fork server that has torch
and its optimizers imported, so a run starts in a fraction of a second), each of which

1. wraps torch.distributed's collectives so that every call is appended to this rank's event
   log (``EVENTS``) before it runs: (name, numel, dtype, async_op), where numel counts the whole
   tensor communicated (a gather's output, a reduce-scatter's input); the handle an
   asynchronous call returns is wrapped too (:class:`Handle`), so that waiting on it appends
   ("wait", name, numel, index of the call's event), and :func:`live_handles` says which
   handles the submission still holds;
2. imports the submission from its directory (the one holding the ``adapters`` module);
3. joins a process group (gloo on the CPU; NCCL with one GPU per rank when asked);
4. runs the job, and saves what it returns (plain data and CPU tensors) for the parent.

A job that raises, a rank that dies and a run that hangs all come back as data: ``errors``
names each failed rank with its traceback (or, for a rank killed before it reported, the
signal that killed it), and ``timed_out`` says that the run was killed after ``timeout_s``
seconds. A rank's report is its saved result, written whole (to a temporary name, then
renamed): a rank that dies or hangs after reporting (gloo's threads can abort or block in the
teardown; "terminate called without an active exception") has done its part, and its verdict
comes from its report. The verdict on all of it is made in the harness.
"""

from __future__ import annotations

import datetime
import functools
import gc
import importlib
import importlib.util
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..tracebacks import student_traceback

EVENTS: list[tuple] | None = None
"""This rank's event log while a job runs (None elsewhere: :func:`record` then does nothing)."""

COLLECTIVES = (
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "_all_gather_base",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base", "reduce",
    "all_to_all", "all_to_all_single", "scatter", "gather", "all_gather_object", "broadcast_object_list",
)
"""The torch.distributed functions whose calls are logged, under these names."""

_ALIASES = {"all_gather_single": "all_gather_into_tensor", "_all_gather_base": "all_gather_into_tensor",
            "reduce_scatter_single": "reduce_scatter_tensor", "_reduce_scatter_base": "reduce_scatter_tensor"}
_depth = 0
TEARDOWN_GRACE_S = 5.0
"""Seconds the ranks get to exit once every one has reported; then the stragglers are killed."""


def record(*event) -> None:
    """Append ``event`` to this rank's log, if one is being kept."""
    if EVENTS is not None:
        EVENTS.append(tuple(event))


def _numel(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0


def _dtype(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    if isinstance(value, (list, tuple)) and value:
        return _dtype(value[0])
    return ""


_HANDLES: "weakref.WeakSet[Handle]" = weakref.WeakSet()


class _Waits:
    """What a wrapped handle or future records when it is waited on: ("wait", name, numel, launch index)."""

    __slots__ = ("name", "numel", "launch")

    def __init__(self, name: str, numel: int, launch: int):
        self.name, self.numel, self.launch = name, numel, launch

    def record(self) -> None:
        record("wait", self.name, self.numel, self.launch)


class _Future:
    """A ``torch.futures.Future`` of a logged collective; ``wait()`` and ``value()`` are recorded.

    So is ``done()`` when it answers True, and waiting on a future chained by ``then`` (which
    completes only after this one): each of them shows the collective finished.
    """

    __slots__ = ("_future", "_waits")

    def __init__(self, future, waits: _Waits):
        self._future, self._waits = future, waits

    @property
    def __class__(self):  # isinstance(future, torch.futures.Future) still holds
        return type(self._future)

    def wait(self):
        result = self._future.wait()
        self._waits.record()
        return result

    def value(self):
        result = self._future.value()
        self._waits.record()
        return result

    def done(self):
        finished = self._future.done()
        if finished:
            self._waits.record()
        return finished

    def then(self, callback):
        # The callback gets the real future: it may run on a communication thread, whose
        # timing must leave no trace in the log (only waiting on the chained future does).
        return _Future(self._future.then(callback), self._waits)


class _AllWaits:
    """The waits of several futures, recorded together (``torch.futures.collect_all``)."""

    __slots__ = ("waits",)

    def __init__(self, waits: list):
        self.waits = waits

    def record(self) -> None:
        for waits in self.waits:
            waits.record()


def _unwrapped(futures) -> tuple[list, list]:
    """(the real futures, the waits of the logged ones) of a list that may hold ``_Future`` wrappers."""
    real = [object.__getattribute__(f, "_future") if type(f) is _Future else f for f in futures]
    return real, [object.__getattribute__(f, "_waits") for f in futures if type(f) is _Future]


def _wait_all(original: Callable) -> Callable:
    @functools.wraps(original)
    def wait_all(futures):
        real, waits = _unwrapped(futures)
        values = original(real)
        _AllWaits(waits).record()
        return values

    return wait_all


def _collect_all(original: Callable) -> Callable:
    @functools.wraps(original)
    def collect_all(futures):
        real, waits = _unwrapped(futures)
        return _Future(original(real), _AllWaits(waits))

    return collect_all

    def __getattr__(self, name):
        return getattr(self._future, name)


class Handle:
    """The handle (``dist.Work``) of an asynchronous collective, as the submission receives it.

    Behaves as the real one (every attribute is the real one's, ``isinstance(h, dist.Work)``
    holds); ``wait()``, and waiting on ``get_future()``, append ("wait", name, numel, launch
    index) to the event log, so that the harness can see when the backward waited for it.
    """

    __slots__ = ("_work", "_waits", "launch", "__weakref__")

    def __init__(self, work, waits: _Waits):
        self._work, self._waits, self.launch = work, waits, waits.launch

    @property
    def __class__(self):
        return type(self._work)

    def wait(self, *args, **kwargs):
        self._waits.record()
        return self._work.wait(*args, **kwargs)

    def is_completed(self):
        finished = self._work.is_completed()
        if finished:  # a loop polling until completion also waited
            self._waits.record()
        return finished

    def get_future(self):
        return _Future(self._work.get_future(), self._waits)

    def __getattr__(self, name):
        return getattr(self._work, name)


def live_handles() -> list[int]:
    """Launch indices (into the event log) of the asynchronous handles that are still referenced."""
    gc.collect()
    return sorted(handle.launch for handle in list(_HANDLES))


def _logged(name: str, function: Callable) -> Callable:
    @functools.wraps(function)
    def logged(*args, **kwargs):
        global _depth
        waits = None
        if _depth == 0:  # one event per call, even when one collective calls another
            # The size logged is the whole tensor communicated: a reduce-scatter's input (its second
            # argument), else the first argument (what is reduced, broadcast or gathered into).
            tensor = args[0] if args else next(iter(kwargs.values()), None)
            if name.startswith(("reduce_scatter", "_reduce_scatter")):
                tensor = args[1] if len(args) > 1 else kwargs.get("input", kwargs.get("input_list", tensor))
            async_op = bool(kwargs.get("async_op", False))
            record(_ALIASES.get(name, name), _numel(tensor), _dtype(tensor), async_op)
            if async_op and EVENTS is not None:
                waits = _Waits(_ALIASES.get(name, name), _numel(tensor), len(EVENTS) - 1)
        _depth += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _depth -= 1
        if waits is not None and result is not None and hasattr(result, "wait"):
            result = Handle(result, waits)
            _HANDLES.add(result)
        return result

    return logged


def log_collectives() -> None:
    """Replace each of torch.distributed's COLLECTIVES by a logging wrapper (in this process, for good)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    futures = torch.futures
    for name, wrap in (("wait_all", _wait_all), ("collect_all", _collect_all)):
        if not getattr(getattr(futures, name), "_cs336_logged", False):
            wrapped = wrap(getattr(futures, name))
            wrapped._cs336_logged = True
            setattr(futures, name, wrapped)
    for name in COLLECTIVES:
        for module in (dist, c10d):
            function = getattr(module, name, None)
            if function is not None and not getattr(function, "_cs336_logged", False):
                wrapped = _logged(name, function)
                wrapped._cs336_logged = True
                setattr(module, name, wrapped)


def load_submission(directory: str):
    """Import ``cs336_systems`` and ``adapters`` from ``directory`` (as the executor does); return ``adapters``."""
    for name, file, package in (("cs336_systems", "cs336_systems/__init__.py", "cs336_systems"),
                                ("adapters", "adapters.py", None)):
        path = os.path.join(directory, file)
        spec = importlib.util.spec_from_file_location(
            name, path, submodule_search_locations=[os.path.join(directory, package)] if package else None)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules["adapters"]


def _worker(rank: int, world_size: int, backend: str, store: str, submission: str, job: str, kwargs: dict,
            out_dir: str, timeout_s: float) -> None:
    global EVENTS
    # Everything this process inherited from the fork server (torch, its optimizers, dynamo: over
    # a million objects) goes to the collector's permanent generation, before the submission is
    # imported: the full collections of live_handles then walk only what the rank made itself
    # (0.6 s of CPU each otherwise, three per run, and each wrote to every inherited page).
    gc.freeze()
    torch.set_num_threads(1)  # the ranks share the machine's cores
    if sys.platform == "linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    elif sys.platform == "darwin":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0")
    result: dict[str, Any]
    try:
        import torch.distributed as dist

        EVENTS = []
        log_collectives()
        adapters = load_submission(submission)
        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        module_name, _, function = job.rpartition(".")
        # "<module>.<function>" names a job of this package; a dotted module path names any
        # importable module's function (a staff tool's rank job).
        module = module_name if "." in module_name else f"{__package__}.{module_name}"
        run = getattr(importlib.import_module(module), function)
        value = run(adapters, rank=rank, world_size=world_size, device=device, **kwargs)
        result = {"value": value, "events": list(EVENTS)}
    except BaseException as error:  # noqa: BLE001  everything a rank does wrong is reported, never raised
        base = next(cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins")
        result = {"error": student_traceback(error, submission)[-8000:], "error_type": base, "message": str(error)[:4000],
                  "events": list(EVENTS or [])}
    try:
        # Saved whole or not at all: a rank killed while saving must not leave half a report.
        path = os.path.join(out_dir, f"rank{rank}.pt")
        torch.save(result, path + ".partial")
        os.replace(path + ".partial", path)
    finally:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


@functools.cache
def _context():
    context = multiprocessing.get_context("forkserver")
    # What every rank needs, imported once by the server: an optimizer's first step imports
    # torch._dynamo, about 2 s of a CPU's time per process otherwise.
    context.set_forkserver_preload(["torch", "torch.distributed", "torch.optim", "torch._dynamo"])
    return context


def launch(load_adapters: Callable[[], Any], job: str, world_size: int, kwargs: dict, *,
           backend: str = "gloo", timeout_s: float = 60.0) -> dict:
    """Run ``job`` on ``world_size`` ranks; return ``{"ranks", "errors", "error_types", "timed_out", "timeout_s",
    "exit_codes"}``.

    ``ranks[r]`` is ``{"value": what the job returned, "events": rank r's event log}``, or None
    for a rank that failed; ``errors[r]`` is then its traceback (or why it returned nothing,
    naming the signal that killed it), and ``error_types[r]`` the (built-in exception class
    name, message) of what it raised. The run is killed ``timeout_s`` seconds after it starts,
    two seconds after the first rank fails (the others would wait for it forever), and
    ``TEARDOWN_GRACE_S`` after every rank has reported (a rank stuck in the teardown then
    costs no verdict and no time-out).
    """
    submission = os.path.dirname(os.path.abspath(load_adapters().__file__))
    work = tempfile.mkdtemp(prefix="ranks-")
    context = _context()
    processes = [
        context.Process(target=_worker, args=(rank, world_size, backend, os.path.join(work, "store"), submission,
                                              job, kwargs, work, timeout_s), daemon=True)
        for rank in range(world_size)
    ]
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + timeout_s
        first_failure = all_reported = None
        while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
            # A rank fails when it reports an error, or exits without a result. One that crashes
            # after saving its result (a gloo thread aborting in the teardown) has done its part:
            # stopping the others then would fail a run that worked.
            failed = [p for rank, p in enumerate(processes) if p.exitcode is not None
                      and "error" in _load(work, rank, {"error": "no result"})]
            if failed and first_failure is None:
                first_failure = time.monotonic()
            if first_failure is not None and time.monotonic() - first_failure > 2.0:
                break
            if all_reported is None and all(os.path.exists(os.path.join(work, f"rank{rank}.pt"))
                                            for rank in range(world_size)):
                all_reported = time.monotonic()
            if all_reported is not None and time.monotonic() - all_reported > TEARDOWN_GRACE_S:
                break  # every rank reported; what is left is a teardown that hangs
            time.sleep(0.02)
        timed_out = any(p.is_alive() for p in processes) and first_failure is None and all_reported is None
        stopped = set()  # the ranks killed here (after a time-out, another's failure, or a hung teardown)
        for rank, process in enumerate(processes):
            if process.is_alive():
                process.kill()
                stopped.add(rank)
            process.join(5)
        ranks, errors, error_types = [], {}, {}
        for rank, process in enumerate(processes):
            result = _load(work, rank, None)
            if result is None:
                why = f"it exited with status {process.exitcode} before it reported a result"
                if rank in stopped:
                    why = "it was stopped after another rank failed" if first_failure is not None else (
                        "it was killed: the run hung")
                elif process.exitcode is not None and process.exitcode < 0:
                    why = f"it was killed by {_signal_name(-process.exitcode)} before it reported a result"
                errors[rank] = f"rank {rank} returned nothing: {why}"
                ranks.append(None)
            elif "error" in result:
                errors[rank] = result["error"]
                error_types[rank] = (result.get("error_type", ""), result.get("message", ""))
                ranks.append(None)
            else:
                ranks.append(result)
        # How each rank ended (None: stopped here; < 0: a signal), reported ranks included: a
        # rank that aborted in the teardown after its report is counted, never judged.
        exits = [None if rank in stopped else process.exitcode for rank, process in enumerate(processes)]
        return {"ranks": ranks, "errors": errors, "error_types": error_types, "timed_out": timed_out,
                "timeout_s": timeout_s, "exit_codes": exits}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _signal_name(number: int) -> str:
    """"SIGABRT (signal 6)", or "signal 99" for a number that names no signal."""
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def _load(work: str, rank: int, default):
    path = os.path.join(work, f"rank{rank}.pt")
    if not os.path.exists(path):
        return default
    try:
        return torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001  a rank still writing, or a broken file
        return default
