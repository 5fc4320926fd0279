"""The replay process: run the submission's kernels, and nothing else of it, on the harness's values.

Started by ``harness/replay.py`` through ``harness/process.py``
(``ExecutorSettings(entry="replay_server")``), as its own leased user with the executor's
confinement, on a folder that holds only the kernels-only modules (``harness/kernels_only.py``)
the harness wrote from its own reading of the submission's source. No other file of the submission exists here, ``adapters`` is never
imported, and the executor's process can neither reach this one's memory nor write its files.

Each module is executed with builtins cut down to ``ALLOWED_BUILTINS`` and an
``__import__`` that admits ``triton``, ``math`` and the other kernels-only modules; the loader
refuses any top-level statement a kernels-only module does not have. On a GPU, ``@triton.jit``
compiles each replayed body; under the CPU interpreter, which runs bodies as Python, what a body
can reach is bounded by ``harness/kernels_only.py``'s rule (names and attributes of Triton's public
language only), checked by the harness before it wrote the module.

Requests (``wire.py`` frames) and replies:

    {"op": "hello"} -> {"ok": {"pid", "uid"}}
    {"op": "replay", "launches": [...], "storages": [...]}
        -> {"ok": {"storages": [flat tensor per storage, after the launches]}} or {"error": {...}}
    {"op": "time", "launches": [...], "storages": [...], "warmup_ms", "rep_ms"}
        -> {"ok": {"ms": median milliseconds of the launches back to back (None without a GPU)}}

A storage is ``{"nbytes", "dtype", "init"}``: ``["const", value]``, ``["poison"]`` (NaN, or
0x7f bytes for integers) or ``["fill", [[offset, shape, stride, dtype, values], ...]]`` (the
harness's values, written through those views over a poisoned storage). A launch is
``launches.LaunchRecord``'s, its tensors naming storages by index.
"""

from __future__ import annotations

import ast
import builtins
import faulthandler
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

import confine.limits
from confine import identity

from .interpreter_memory import install_if_interpreted
from .launches import storage_view, typed
from .triton_language import snapshot_if_interpreted
from .wire import DTYPES, Closed, recv_frame, send_frame

_TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
                 torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}


# The builtins a kernels-only module sees (harness/kernels_only.py admits no other name).
ALLOWED_BUILTINS = ("range", "min", "max", "len", "int", "float", "bool", "abs", "tuple", "zip", "enumerate",
                    "True", "False", "None")
COMPILE_THREADS = 4  # a replay's kernels compile this many at a time (_compile_ahead)
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef, ast.Expr)


class Refused(Exception):
    """A replay that cannot run as asked: the message says why, for the student."""


class Modules:
    """The kernels-only modules under ``root``, loaded with cut-down builtins (``interpret``: whether
    ``@triton.jit`` makes interpreted functions, as under ``TRITON_INTERPRET=1``)."""

    def __init__(self, root: Path):
        self.root = root
        self.loaded: dict[tuple[str, bool], dict] = {}

    def path_of(self, name: str) -> Path | None:
        for candidate in (self.root / (name.replace(".", "/") + ".py"), self.root / name.replace(".", "/") / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def module(self, name: str, interpret: bool) -> dict:
        key = (name, interpret)
        if key in self.loaded:
            return self.loaded[key]
        path = self.path_of(name)
        if path is None:
            raise Refused(f"no kernels-only module {name}")
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
        for node in tree.body:  # the harness wrote only these; anything else is not its module
            if not isinstance(node, _TOP_LEVEL):
                raise Refused(f"{path.name}: a {type(node).__name__} is not part of a kernels-only module")
        import triton

        namespace: dict[str, Any] = {"__name__": f"cs336_replay_{'run' if interpret else 'check'}.{name}",
                                     "__file__": str(path), "__builtins__": self._builtins(interpret)}
        self.loaded[key] = namespace
        saved = triton.knobs.runtime.interpret
        triton.knobs.runtime.interpret = interpret
        try:
            exec(compile(source, str(path), "exec"), namespace)  # noqa: S102  kernels-only text, cut-down builtins
        finally:
            triton.knobs.runtime.interpret = saved
        return namespace

    def _builtins(self, interpret: bool) -> dict:
        allowed = {name: getattr(builtins, name) for name in ALLOWED_BUILTINS if hasattr(builtins, name)}
        modules = self

        def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and (name == "math" or name == "triton" or name.startswith("triton.")):
                return __import__(name, globals, locals, fromlist, level)
            if level == 0 and modules.path_of(name) is not None:
                namespace = modules.module(name, interpret)
                return _Namespace(namespace)
            raise ImportError(f"a replayed kernel module may import only triton, math and kernels-only modules, not {name}")

        allowed["__import__"] = restricted_import
        return allowed


class _Namespace:
    """A loaded kernels-only module, as ``from module import name`` sees it."""

    def __init__(self, namespace: dict):
        self.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})


class Replayer:
    def __init__(self, root: Path):
        self.modules = Modules(root)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.interpreting = os.environ.get("TRITON_INTERPRET") == "1"
        self.checked: set = set()

    def kernel(self, file: str, name: str, interpret: bool):
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        namespace = self.modules.module(module, interpret)
        kernel = namespace.get(name)
        if kernel is None or not hasattr(kernel, "run"):
            raise Refused(f"{file} has no replayable kernel {name}")
        return kernel

    def run(self, request: dict) -> dict:
        storages = [self._storage(s) for s in request["storages"]]
        if not self.interpreting:
            self._compile_ahead(request["launches"], storages)
        for index, launch in enumerate(request["launches"]):
            kernel, args, options, grid = self._launch(launch, storages)
            try:
                kernel[grid](*args, **options)
            except Refused:
                raise
            except Exception as error:  # noqa: BLE001  the kernel's own error, named for the student
                raise Refused(f"launch {index + 1} ({launch['name']}) failed when replayed: "
                              f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300] if str(error).strip() else ''}") from None
        if self.device == "cuda":
            torch.cuda.synchronize()
        return {"storages": [flat.cpu() for _, flat in storages]}

    def time(self, request: dict) -> dict:
        """The median milliseconds of the launches, replayed back to back (``triton.testing.do_bench``,
        ``rep_ms`` of repeats), on a GPU; ``{"ms": None}`` under the interpreter."""
        if self.interpreting or self.device != "cuda":
            return {"ms": None}
        import triton.testing

        storages = [self._storage(s) for s in request["storages"]]
        self._compile_ahead(request["launches"], storages)
        prepared = [self._launch(launch, storages) for launch in request["launches"]]

        def replayed():
            for kernel, args, options, grid in prepared:
                kernel[grid](*args, **options)

        try:
            ms = triton.testing.do_bench(replayed, warmup=int(request.get("warmup_ms", 100)),
                                         rep=int(request.get("rep_ms", 1000)), return_mode="median")
        except Exception as error:  # noqa: BLE001  the kernel's own error, named
            raise Refused(f"timing the replayed launches failed: {type(error).__name__}: {str(error)[:300]}") from None
        return {"ms": float(ms)}

    def _launch(self, launch: dict, storages: list) -> tuple:
        """(kernel, arguments, options, grid) of one recorded launch."""
        kernel = self.kernel(launch["file"], launch["name"], self.interpreting)
        args = [self._arg(launch["args"].get(name), storages) for name in kernel.arg_names]
        options = {k: v for k, v in launch.get("options", {}).items() if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
        if self.interpreting:
            options = {}
        return kernel, args, options, tuple(int(g) for g in launch["grid"])

    def _compile_ahead(self, launches: list[dict], storages: list) -> None:
        """Compile the kernels of every launch at once, in threads (Triton's ``AsyncCompileMode``;
        its compiles run ptxas and much of LLVM outside the GIL), before any runs: a call's first
        replay waited for each of its kernels' compiles in turn. A compile that fails here is left
        to its launch, which compiles again and names the error."""
        try:
            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError:  # another Triton: the launches compile one by one
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=COMPILE_THREADS) as pool, AsyncCompileMode(pool, ignore_errors=True):
            for launch in launches:
                try:
                    kernel, args, options, grid = self._launch(launch, storages)
                    kernel.warmup(*args, grid=grid, **options)
                except Exception:  # noqa: BLE001  the launch itself reports it
                    continue

    def _storage(self, spec: dict):
        base = torch.empty(int(spec["nbytes"]), dtype=torch.uint8, device=self.device)
        flat = typed(base, DTYPES[spec["dtype"]])
        init = spec["init"]
        if init[0] == "const":
            flat.fill_(init[1])
        else:
            _poison(flat)
            if init[0] == "fill":
                for offset, shape, stride, view_dtype, values in init[1]:
                    target = typed(base, DTYPES[view_dtype])
                    index = torch.arange(target.numel(), device=self.device).as_strided(shape, stride, offset)
                    target[index.reshape(-1)] = values.to(device=self.device, dtype=target.dtype).reshape(-1)
        return base, flat

    def _arg(self, value: Any, storages: list):
        if isinstance(value, list) and value and value[0] == "tensor":
            _, sid, offset, shape, stride, dtype = value
            return storage_view(storages[sid][0], offset, shape, stride, dtype)
        if isinstance(value, list) and value and value[0] == "desc":
            from triton.tools.tensor_descriptor import TensorDescriptor

            _, tensor, shape, strides, block_shape = value
            return TensorDescriptor(self._arg(tensor, storages), shape, strides, block_shape)
        if isinstance(value, list) and value and value[0] == "dtype":
            import triton.language as tl

            return getattr(tl, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}.get(value[1], value[1]))
        if isinstance(value, list):
            raise Refused(f"an argument the grader cannot replay ({value[-1] if value else 'unknown'})")
        return value

def _poison(flat: torch.Tensor) -> None:
    if flat.is_floating_point():
        flat.fill_(float("nan"))
    elif flat.dtype == torch.bool:
        flat.fill_(True)
    else:
        flat.view(torch.uint8).fill_(0x7F)


def main(argv: list[str]) -> None:
    root, in_fd, out_fd, limits = argv
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    identity.harden()
    confine.limits.apply(json.loads(limits))
    sys.modules.pop("adapters", None)
    replayer = Replayer(Path(root))
    language = snapshot_if_interpreted()  # before any kernel: set back after each request (triton_language.py)
    install_if_interpreted()  # a kernel's access outside its tensors is refused, not left in this process's heap
    in_fd, out_fd = int(in_fd), int(out_fd)
    while True:
        try:
            request = recv_frame(in_fd)
        except Closed:
            return
        op = request.get("op") if isinstance(request, dict) else None
        try:
            if op == "hello":
                reply = {"ok": {"pid": os.getpid(), "uid": os.getuid()}}
            elif op == "replay":
                reply = {"ok": replayer.run(request)}
            elif op == "time":
                reply = {"ok": replayer.time(request)}
            else:
                reply = {"error": {"message": f"unknown request {op!r}"}}
        except Refused as refusal:
            reply = {"error": {"message": str(refusal), "refused": True}}
        except Exception as error:  # noqa: BLE001  reported, never raised past the loop
            reply = {"error": {"message": f"{type(error).__name__}: {error}"[:2000],
                               "traceback": traceback.format_exc()[-4000:]}}
        send_frame(out_fd, reply)
        if language is not None:
            language.restore()
