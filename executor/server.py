"""The executor's main loop: import the submission, then run what the harness asks, one request at a time.

Started by ``harness/process.py`` as ``python -I -B -c <bootstrap> RUNTIME SUBMISSION IN_FD OUT_FD LIMITS``
(RUNTIME is the executor's folder, holding this package's copy and ``confine``'s; the bootstrap
has already entered ``confine.identity``). Before any student code exists it hardens the process
(``confine.identity.harden``), applies the resource limits (``confine.limits``), and installs the Triton
launch log. The submission is imported at the first request, so an import error is the answer
to that request, not a dead process.

Requests (dicts, see ``wire.py`` for values) and what they return:

    {"op": "call", "target": name or handle id, "attr": None or str, "args", "kwargs", "grad": bool, "watch": bool}
        ``adapters.<name>(*args, **kwargs)``, or ``handle.<attr>(...)``, under ``torch.set_grad_enabled(grad)``
    {"op": "getattr", "target": handle id, "name": str}
    {"op": "probe", "name": str, "args", "kwargs", "grad": bool}
        one of the kit's probes (``probes.PROBES``), given the adapters module first
    {"op": "backward", "graph": id, "grad": tensor, "watch": bool}
        gradients of a returned tensor's inputs for ``grad``, one per input that required grad
    {"op": "saved", "graph": id}
        the tensors the returned tensor's ``grad_fn`` saved (``saved_tensors``)
    {"op": "release", ...}, {"op": "reset"}: forget handles and graphs

Every request may carry ``"release": {"handles": [...], "graphs": [...]}``, and ``"autotune"``:
``"full"`` (a timing test: the submission's autotuners benchmark every config), ``"config:n"``
(each runs its n-th config), else each keeps the first config that launches (``autotune.py``);
and ``"timing": true`` (a timing test: PyTorch's defaults, see below).
The reply is ``{"ok": value, "launches": [[kernel, file], ...], "autotune_configs": n}``
or ``{"error": {...}, "launches": [...], ...}``, where n is the most configs an autotuner had; a
``watch``ed call or backward also returns ``"replay"``, the full record of its launches
(``launches.LaunchRecord``), which the harness replays without this process. In
every request but a timing test's, new tensors hold NaN (``uninitialized.py``);
while a request runs, the executor may send ``{"callback": id, "args", "kwargs"}`` and wait for
``{"op": "return", "value"}`` or ``{"op": "raise", "error"}`` (requests nested inside a
callback are served too). Between requests, ``triton.language`` is set back to what it was
when the submission had been imported (``triton_language.py``: Triton's interpreter leaves
patches behind); under the interpreter a kernel's access outside the tensor its pointer came
from is refused before it can corrupt the process (``interpreter_memory.py``). Tensor
arguments that require grad arrive as fresh leaves; a returned tensor with an autograd graph is
kept, with those leaves, under a graph id.
"""

from __future__ import annotations

import builtins
import faulthandler
import json
import os
import signal
from typing import Any

import torch

import confine.limits
from confine import identity

from . import probes, tripwire
from . import autotune, interpreter_memory
from .tracebacks import student_traceback
from .triton_language import LanguageSnapshot, snapshot_if_interpreted
from .uninitialized import filled
from .launches import LaunchLog
from .loading import import_submission
from .wire import Closed, Codec, encode_tensor, recv_frame, send_frame

MAX_TEXT = 20_000

def error_payload(error: BaseException, submission: str | None = None) -> dict:
    """What the harness needs to raise a stand-in for ``error``: the nearest built-in class and the
    text (its traceback as ``student_traceback`` writes it; ``submission``: the submission's folder)."""
    base = "RuntimeError"
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins" and cls not in (KeyboardInterrupt, GeneratorExit, BaseException):
            base = cls.__name__
            break
    if isinstance(error, torch.OutOfMemoryError):
        base = "OutOfMemoryError"
    try:
        message = str(error)
    except Exception:  # noqa: BLE001  a student exception whose __str__ fails
        message = "<the exception's message could not be read>"
    try:
        text = student_traceback(error, submission)
    except Exception:  # noqa: BLE001
        text = ""
    code = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else None
    return {"type": f"{type(error).__module__}.{type(error).__qualname__}", "base": base,
            "message": message[:MAX_TEXT], "traceback": text[-MAX_TEXT:], "code": code}


class Server:
    """The executor's state: the submission, the objects and graphs it keeps, the pipes."""

    def __init__(self, submission: str, in_fd: int, out_fd: int):
        self.submission = submission
        self.in_fd, self.out_fd = in_fd, out_fd
        self.adapters = None
        self.objects: dict[int, Any] = {}
        self.graphs: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        self.next_id = 1
        self.leaves: list[torch.Tensor] = []
        self.launch_log = LaunchLog(submission)
        self.probes: dict[str, Any] = {}
        self.triton = False  # whether kernels may run here (main sets it): then the language is restored
        self.language: LanguageSnapshot | None = None  # triton.language as the submission's import left it
        self.codec = Codec(export=self._export, imports={"R": self._resolve, "C": self._callback},
                           on_tensor=self._arrived, encode_tensor_fn=self._encode_tensor)

    # -- values --------------------------------------------------------------------------

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _export(self, obj: Any) -> list:
        handle = self._new_id()
        self.objects[handle] = obj
        name = getattr(obj, "__name__", None)
        info = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "name": name if isinstance(name, str) else None, "callable": callable(obj)}
        return ["H", handle, info]

    def _resolve(self, node: list) -> Any:
        if len(node) != 2 or node[1] not in self.objects:
            raise LookupError(f"no object with handle {node[1:]!r} (it was released, or the executor restarted)")
        return self.objects[node[1]]

    def _callback(self, node: list):
        callback_id, name = node[1], node[2]
        server = self

        def call_harness(*args, **kwargs):
            return server.call_back(callback_id, args, kwargs)

        call_harness.__name__ = call_harness.__qualname__ = str(name)
        return call_harness

    def _arrived(self, tensor: torch.Tensor, requires_grad: bool, graph: Any) -> torch.Tensor:
        if not requires_grad:
            return tensor
        leaf = tensor.detach().requires_grad_(True)
        self.leaves.append(leaf)
        return leaf

    def _encode_tensor(self, tensor: torch.Tensor) -> list:
        graph = None
        if tensor.requires_grad and tensor.grad_fn is not None:
            graph_id = self._new_id()
            self.graphs[graph_id] = (tensor, list(self.leaves))
            graph = {"id": graph_id}
        return encode_tensor(tensor, graph)

    # -- the submission ------------------------------------------------------------------

    def load_adapters(self):
        if self.adapters is None:
            self.adapters = import_submission(self.submission)
            if self.triton:
                self.language = snapshot_if_interpreted()  # what every later request starts from
        return self.adapters

    # -- requests ------------------------------------------------------------------------

    def handle(self, request: dict) -> Any:
        release = request.get("release") or {}
        for handle in release.get("handles", ()):
            self.objects.pop(handle, None)
        for graph in release.get("graphs", ()):
            self.graphs.pop(graph, None)
        op = request.get("op")
        outer, self.leaves = self.leaves, []
        try:
            return self._run(op, request)
        finally:
            self.leaves = outer

    def _run(self, op: str, request: dict) -> Any:
        if op == "call":
            target = request["target"]
            function = getattr(self.load_adapters(), target) if isinstance(target, str) else self._resolve(["R", target])
            if request.get("attr"):
                function = getattr(function, request["attr"])
            args = self.codec.decode(request["args"])
            kwargs = self.codec.decode(request["kwargs"])
            with torch.set_grad_enabled(bool(request.get("grad", True))):
                result = function(*args, **kwargs)
            return self.codec.encode(result)
        if op == "getattr":
            return self.codec.encode(getattr(self._resolve(["R", request["target"]]), request["name"]))
        if op == "probe":
            name = str(request["name"])
            if name not in self.probes:
                raise KeyError(f"no probe named {name!r}")
            probe = self.probes[name]
            args = self.codec.decode(request["args"])
            kwargs = self.codec.decode(request["kwargs"])
            with torch.set_grad_enabled(bool(request.get("grad", True))):
                result = probe(self.load_adapters, *args, **kwargs)
            return self.codec.encode(result)
        if op == "backward":
            output, leaves = self.graphs[request["graph"]]
            grad = self.codec.decode(request["grad"])
            wanted = [leaf for leaf in leaves if leaf.requires_grad]
            grads = torch.autograd.grad([output], wanted, [grad], retain_graph=True, allow_unused=True) if wanted else ()
            return self.codec.encode([None if g is None else g.detach() for g in grads])
        if op == "saved":
            output, _ = self.graphs[request["graph"]]
            return self.codec.encode([t.detach() for t in output.grad_fn.saved_tensors])
        if op == "reset":
            self.objects.clear()
            self.graphs.clear()
            return None
        if op == "release":
            return None
        if op == "hello":
            return {"pid": os.getpid(), "uid": os.getuid(), "network_confined": identity.network_confined,
                    "files_confined": identity.files_confined}
        raise ValueError(f"unknown request {op!r}")

    def answer(self, request: dict) -> dict:
        mode = request.get("autotune", autotune.FIRST)
        recording = bool(request.get("watch")) and request.get("op") in ("call", "backward")
        if recording:
            self.launch_log.recording()
        with autotune.autotune_mode(mode) as tally, filled(not request.get("timing")):
            try:
                reply = {"ok": self.handle(request)}
            except BaseException as error:  # noqa: BLE001  SystemExit and KeyboardInterrupt from student code too
                reply = {"error": error_payload(error, self.submission)}
        record = self.launch_log.stop_recording() if recording else None
        if record is not None and "ok" in reply:
            try:
                reply["replay"] = self.codec.encode(record.as_data())
            except Exception as error:  # noqa: BLE001  the harness then has nothing to replay
                reply["replay_error"] = f"{type(error).__name__}: {error}"[:500]
        reply["autotune_configs"] = tally.configs
        reply["launches"] = [[launch.name, launch.file] for launch in self.launch_log.take()]
        return reply

    def call_back(self, callback_id: int, args: tuple, kwargs: dict) -> Any:
        """Run the harness's callback ``callback_id``; serve nested requests until it returns."""
        send_frame(self.out_fd, {"callback": callback_id, "args": self.codec.encode(list(args)),
                                 "kwargs": self.codec.encode(kwargs)})
        while True:
            message = recv_frame(self.in_fd)
            op = message.get("op")
            if op == "return":
                return self.codec.decode(message["value"])
            if op == "raise":
                error = message.get("error") or {}
                cls = getattr(builtins, str(error.get("base")), RuntimeError)
                if not (isinstance(cls, type) and issubclass(cls, Exception)):
                    cls = RuntimeError
                raise cls(str(error.get("message", "")))
            send_frame(self.out_fd, self.answer(message))

    def serve(self) -> None:
        while True:
            try:
                request = recv_frame(self.in_fd)
            except Closed:
                return
            send_frame(self.out_fd, self.answer(request))
            if self.language is not None:  # between requests, off any test's clock
                self.language.restore()


def main(argv: list[str]) -> None:
    submission, in_fd, out_fd, limits = argv
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness asks for the stacks of a hang
    identity.harden()  # no new privileges, death with the harness, no core files
    confine.limits.apply(json.loads(limits))  # soft and hard: student code cannot raise them again
    server = Server(submission, int(in_fd), int(out_fd))
    if os.environ.get("CS336_EXECUTOR_TRITON", "1") == "1":
        try:
            server.launch_log.install()
            autotune.install(interpreter=os.environ.get("TRITON_INTERPRET") == "1")
            interpreter_memory.install_if_interpreted()  # no kernel's stray access corrupts later requests
            server.triton = True
        except ImportError:  # no triton on this machine: no launch can happen either
            pass
    # Before any student code exists: the probes are looked up in this table from now on (a
    # submission that edits the probes' modules does not change which function runs), and the
    # tripwire's audit hook is installed for good. The kit's modules stay in sys.modules:
    # the parallel probes' worker processes find their functions there by name.
    server.probes = probes.table()
    tripwire.install(submission)
    server.serve()
