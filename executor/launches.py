"""Which Triton kernels ran, and with what: a launch log installed before the submission is imported.

Read by the executor (``server.py``), which installs it, by ``pytest`` runs without
``--isolate``, which install it in their own process, and by the leaderboard's worker. Every
launch of a ``@triton.jit`` function (``kernel[grid](...)``, directly or through
``@triton.autotune`` and ``@triton.heuristics``) goes through ``JITFunction.run`` on a GPU and
through ``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``; both are wrapped here to note
the kernel's name and the file that defines it. Kernels that torch.compile, FlexAttention or
other libraries generate are launched another way and never appear, and launches of kernels
defined outside the submission are dropped.

While ``recording()`` is on (a request the harness will replay), each launch is also written
down in full (``LaunchRecord``): the kernel, its grid, its launch options, and every argument,
a tensor as a view of a storage numbered in the order the request first passed it to a kernel,
with that storage's contents as they were just before (a constant, or the values). The record
is the executor's word, and everything here runs beside the submission, which can rewrite it:
the harness uses it only as a script to replay (``harness/replay.py``), with values it supplies itself,
in a process that runs none of the submission's Python. A forged record can only name kernels
of the submission, and must then compute the attention when replayed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # the launch options a replay repeats


@dataclass(frozen=True)
class Launch:
    """One launch: the kernel's function name and the file (relative to the submission) that defines it."""

    name: str
    file: str


class LaunchRecord:
    """The launches of one request, written down for the harness to replay (see the module docstring).

    ``as_data()`` is plain data for ``wire.py``: ``{"launches": [...], "storages": [...]}``, where
    a launch is ``{"file", "name", "grid": [x, y, z], "options": {...}, "args": {name: value}}``, a
    value is a number, a string, None, ``["tensor", storage, offset, shape, stride, dtype]``,
    ``["desc", tensor, shape, strides, block_shape]`` (a host-side tensor descriptor) or
    ``["dtype", name]``, and a storage is ``{"nbytes", "dtype", "init"}`` with ``init`` either
    ``["const", value]`` or ``["data", flat tensor]``.
    """

    def __init__(self) -> None:
        self.launches: list[dict] = []
        self.storages: list[dict] = []
        self._seen: dict[tuple[int, str], int] = {}
        self._alive: list[Any] = []  # keeps each storage alive, so that no address is reused within the request

    def note(self, kernel, file: str, args: tuple, kwargs: dict, grid) -> None:
        names = list(getattr(kernel, "arg_names", ()))
        bound: dict[str, Any] = {}
        options: dict[str, Any] = {}
        for name, value in zip(names, args):
            bound[name] = value
        for name, value in kwargs.items():
            if name in names:
                bound[name] = value
            elif name in OPTIONS:
                options[name] = value
        for param in getattr(kernel, "params", ()):  # defaults the call left out (JITFunction)
            if param.name not in bound and getattr(param, "default", None) is not None:
                bound[param.name] = param.default
        if callable(grid):
            grid = grid(bound)
        grid = [int(g) for g in tuple(grid)[:3]]
        self.launches.append({"file": file, "name": kernel.__name__ if hasattr(kernel, "__name__") else str(kernel),
                              "grid": grid + [1] * (3 - len(grid)),
                              "options": {k: v for k, v in options.items() if isinstance(v, (int, bool, str))},
                              "args": {name: self._value(value) for name, value in bound.items()}})

    def _value(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, (bool, int, float, str)) or value is None:
            return value
        base = getattr(value, "base", None)
        if isinstance(base, torch.Tensor) and hasattr(value, "block_shape"):  # triton.tools.tensor_descriptor
            return ["desc", self._tensor(base), [int(v) for v in value.shape], [int(v) for v in value.strides],
                    [int(v) for v in value.block_shape]]
        inner = getattr(value, "value", value)  # tl.constexpr
        if inner is not value:
            return self._value(inner)
        name = getattr(value, "name", None)
        if type(value).__module__.startswith("triton") and isinstance(name, str):  # tl.float16 and kin
            return ["dtype", name]
        return ["unsupported", type(value).__name__]

    def _tensor(self, tensor: torch.Tensor) -> list:
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), str(tensor.device))
        if key not in self._seen:
            self._seen[key] = len(self.storages)
            self._alive.append(storage)
            itemsize = tensor.element_size()
            flat = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
                storage, 0, (storage.nbytes() // itemsize,), (1,))
            self.storages.append({"nbytes": storage.nbytes(), "dtype": str(tensor.dtype).removeprefix("torch."),
                                  "init": _initial(flat)})
        return ["tensor", self._seen[key], int(tensor.storage_offset()), list(tensor.shape), list(tensor.stride()),
                str(tensor.dtype).removeprefix("torch.")]

    def as_data(self) -> dict:
        return {"launches": self.launches, "storages": self.storages}

    def named(self, inputs: dict[str, torch.Tensor], root: str | os.PathLike, forward: int) -> tuple[dict, int]:
        """The record as the leaderboard's worker sends it: no values, a storage named by the input
        of ``inputs`` it holds, by its constant, or ``["unknown"]``; files relative to ``root`` (a
        launch of a kernel defined elsewhere is left out). Returns it with how many of the first
        ``forward`` launches it kept."""
        names = {tensor.untyped_storage().data_ptr(): name for name, tensor in inputs.items()}
        root = os.path.join(os.path.realpath(root), "")
        launches, kept_forward = [], 0
        for index, launch in enumerate(self.launches):
            file = launch["file"]
            if os.path.isabs(file):  # the interpreter's log names files by their real path
                file = file[len(root):] if file.startswith(root) else None
            if file is not None:
                launches.append({**launch, "file": file})
                kept_forward += index < forward
        storages = []
        for spec, storage in zip(self.storages, self._alive):
            pointer = storage.data_ptr()
            init = ["input", names[pointer]] if pointer in names else spec["init"] if spec["init"][0] == "const" else ["unknown"]
            storages.append({"nbytes": spec["nbytes"], "dtype": spec["dtype"], "init": init})
        return {"launches": launches, "storages": storages}, kept_forward


def _initial(flat: torch.Tensor) -> list:
    """A storage's contents before a launch: one constant, or a copy of the values."""
    if flat.numel() == 0:
        return ["const", 0]
    first = flat[:1]
    if flat.is_floating_point() and bool(torch.isnan(flat).all()):
        return ["const", float("nan")]
    if bool((flat == first).all()):
        return ["const", first.item()]
    return ["data", flat.detach().cpu().clone()]


def typed(raw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A storage's bytes (any flat tensor) as a flat tensor of ``dtype``, a trailing part element left out."""
    raw = raw if raw.dtype == torch.uint8 else raw.view(torch.uint8)
    size = torch.empty(0, dtype=dtype).element_size()
    return raw[: raw.numel() - raw.numel() % size].view(dtype)


def storage_view(raw: torch.Tensor, offset: int, shape: list, stride: list, dtype: str) -> torch.Tensor:
    """The view a record's ``["tensor", storage, offset, shape, stride, dtype]`` names, over that storage's bytes.
    (For the harness and the replay; the leaderboard's worker, which has no ``wire.py``, never calls it.)"""
    from .wire import DTYPES

    return typed(raw, DTYPES[dtype]).as_strided(shape, stride, offset)


class LaunchLog:
    """Notes each launch of a Triton kernel defined under ``root``; ``take()`` returns and clears them.

    With ``root`` None every launch is noted, its ``file`` the defining file's real path: the
    leaderboard's ``--cpu`` run, whose parent judges the names against its own reading of the
    submission's source (``harness/triton_source.py``).
    """

    def __init__(self, root: str | None):
        self.root = None if root is None else os.path.join(os.path.realpath(root), "")
        self._launches: list[Launch] = []
        self.record: LaunchRecord | None = None

    def install(self) -> None:
        """Wrap Triton's launch paths; call before the submission imports triton. A log installed
        before in this process is replaced (the newest log notes every launch, once)."""
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            if getattr(cls.run, "_cs336_launch_log", None) is self:
                continue
            cls.run = self._wrap(getattr(cls.run, "_cs336_original", cls.run))

    def uninstall(self) -> None:
        """Put Triton's own launch paths back (the leaderboard's timed calls run without the log)."""
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = getattr(cls.run, "_cs336_original", None)
            if original is not None:
                cls.run = original

    def _wrap(self, run):
        log = self

        def logged_run(kernel, *args, grid=None, warmup=False, **kwargs):
            if not warmup:
                file = log._note(getattr(kernel, "fn", None))
                if file is not None and log.record is not None:
                    log.record.note(kernel, file, args, kwargs, grid)
            return run(kernel, *args, grid=grid, warmup=warmup, **kwargs)

        logged_run._cs336_launch_log = self
        logged_run._cs336_original = run
        return logged_run

    def _note(self, fn) -> str | None:
        code = getattr(fn, "__code__", None)
        if code is None:
            return None
        path = os.path.realpath(code.co_filename)
        if self.root is None:
            self._launches.append(Launch(fn.__name__, path))
            return path
        if path.startswith(self.root):
            file = os.path.relpath(path, self.root)
            self._launches.append(Launch(fn.__name__, file))
            return file
        return None

    def recording(self) -> LaunchRecord:
        """Start writing the launches down in full (until ``stop_recording``)."""
        self.record = LaunchRecord()
        return self.record

    def stop_recording(self) -> LaunchRecord | None:
        record, self.record = self.record, None
        return record

    def take(self) -> list[Launch]:
        """The launches noted since the last call, in order."""
        launches, self._launches = self._launches, []
        return launches
