"""The harness's side of the executor: call the submission through it, and survive it.

Read by the root ``conftest.py`` (which makes the ``Executor`` under ``--isolate``), by the grader's
pytest plugin (``restart_if_failed``) and by staff changing the protocol (``executor/server.py`` is
the other side). This file is the request layer of the harness's side:

- ``process.py`` starts, stops and confines the process (``ExecutorProcess``, ``ExecutorSettings``,
  ``ExecutorFailure``); ``Executor`` here builds on it;
- ``proxies.py`` is what a test holds (``RemoteAdapters``, ``RemoteObject``);
- ``autograd_bridge.py`` gives returned tensors a stand-in graph (``saved_tensors``);
- ``triton_credit.py`` (a part of ``Executor``) and ``replay.py`` decide whether a Triton call's
  outputs are its kernels' work (``executor/replay_server.py`` runs the kernels, and nothing else
  of the submission, in a process of their own).

What a test sees:

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
- each call of a function marked as the Triton implementation, and each backward of one, is
  replayed from its launch record on the harness's own values, in a process that runs only the
  submission's kernels (``replay.py``): an output the replay does not reproduce earns nothing.
"""

from __future__ import annotations

import builtins
import contextlib
import select
import time
import weakref
from typing import Any

import torch

from executor.wire import Closed, Codec, ProtocolError, TimedOut, recv_frame, send_frame

from . import replay as replays
from .autograd_bridge import GraphLink, stand_in_graph
from .cpu_clock import WALL_FACTOR, Budget
from .process import START_TIMEOUT_S, ExecutorFailure, ExecutorProcess, ExecutorSettings, describe_limit
from .proxies import RemoteObject
from .triton_credit import TritonCredit

__tracebackhide__ = True  # pytest leaves the request layer out of a failure's traceback: plumbing, not the test
REPLY_BASE_BYTES = 64 << 20  # what any reply may hold, besides twice the largest request of its test


def reply_limit(request_bytes: int) -> int:
    """The largest reply (or callback) frame the harness reads, given the largest request frame of
    the test so far: outputs, saved tensors and gradients are at most about twice the inputs that
    made them; a larger frame fails the call unread."""
    return REPLY_BASE_BYTES + 2 * request_bytes


class Executor(TritonCredit, ExecutorProcess):
    """The harness's executor: one process at a time (``ExecutorProcess``), called through requests
    (see the module docstring); restarted after it fails."""

    def __init__(self, settings: ExecutorSettings):
        super().__init__(settings)
        self.timing = False  # the current test reads timings: PyTorch's defaults, real autotuning (begin_test)
        self.tune = False  # autotuners tune for real (timing tests, and every test under CS336_AUTOTUNE=full)
        self._autotune_config: int | None = None  # requests run this config of every autotuner (autotune_config)
        self._autotune_ops: tuple[str, ...] | None = None  # ... only requests of these ops (None: all)
        self.autotune_configs = 0  # the most configs one of the submission's autotuners had, this test
        self.fresh_after_test = False  # Triton or CUDA failed in this test: the next test gets a new process
        self._stopped_for_freshness = False
        self.launches: list[tuple[str, str]] = []
        self._callbacks: dict[int, Any] = {}
        self._released_handles: list[int] = []
        self._released_graphs: list[int] = []
        self._inputs: list[torch.Tensor] = []
        self._replays: replays.Replays | None = None  # the kernels-only modules and their process (made on first use)
        self._triton_graphs: dict[int, dict] = {}  # graph id -> what a Triton call's backward is checked with
        self._call_args: tuple = ((), {})
        self._last_graph: int | None = None
        self._sent_max = 0  # the largest request frame of the current test (bytes)
        self.codec = Codec(export=self._export, imports={"H": self._handle}, on_tensor=self._arrived)

    def _spawn(self) -> None:
        super()._spawn()
        self._released_handles.clear()  # the objects and graphs they name died with the last process
        self._released_graphs.clear()

    def released(self, generation: int, graph: bool, number: int) -> None:
        """A finalizer's note that the harness dropped handle or graph ``number`` of the process of
        ``generation``: sent with the next request, if that process still runs. Numbers start again
        in each process, so a note for an earlier process, sent to the next one, released that
        one's object of the same number: a test's output of a process since restarted, collected
        during a later test, failed that test's backward ("KeyError: 7" from the executor)."""
        if generation == self.generation:
            (self._released_graphs if graph else self._released_handles).append(number)

    # -- tests ---------------------------------------------------------------------------

    def begin_test(self, timing: bool = False, tune: bool = False) -> None:
        """Called before each test: a new time budget, no failure yet, no launches yet.
        ``timing``: the test's verdict reads timings, so the submission's autotuners tune for real
        (``executor/autotune.py``) and new tensors are not filled with NaN
        (``executor/uninitialized.py``); ``tune``: they tune for real all the same. Otherwise each
        keeps the first config that launches."""
        self.timing = timing
        self.tune = timing or tune
        self._autotune_config = None
        self.autotune_configs = 0
        self.failure = None
        self.launches = []
        self._sent_max = 0
        timeout = self.settings.test_timeout_s
        self.budget = None
        if timeout is not None:
            wall = self.settings.wall_timeout_s or WALL_FACTOR * timeout
            self.budget = Budget(timeout, wall, lambda: self.process.pid if self.process is not None else None)
        self.deadline = None if self.budget is None else self.budget.wall_deadline()

    @contextlib.contextmanager
    def autotune_config(self, index: int, ops: tuple[str, ...] | None = None):
        """Requests in this scope (only those whose op is in ``ops``, if given: ``("backward",)``)
        run config ``index`` of every autotuner of the submission (``executor/autotune.py``, mode
        ``"config:n"``); the others run as the test would. ``autotune_configs`` counts afresh from here."""
        outer = self._autotune_config, self._autotune_ops
        self._autotune_config, self._autotune_ops = int(index), ops
        self.autotune_configs = 0
        try:
            yield
        finally:
            self._autotune_config, self._autotune_ops = outer

    def end_test(self) -> None:
        """Called after each test (in its teardown). After a test in which Triton or CUDA raised,
        the executor is stopped and the next test gets a fresh process (started between tests,
        never charged to a test), because the failure can break every later call in the process:
        a kernel that reads out of bounds leaves the CUDA context broken ("CUDA error: an illegal
        memory access was encountered" from every later call; seen on an H200, where one bad-input
        test of a real submission failed the next nine tests of its process). What Triton's interpreter leaves
        patched in ``triton.language`` the executor sets back itself after every request
        (``executor/triton_language.py``)."""
        self.deadline = None
        self.budget = None
        if self.fresh_after_test:
            self.fresh_after_test = False
            self.stop()
            self._stopped_for_freshness = True

    def close(self) -> None:
        """Stop the executor and the replay process, and remove the kernels-only modules."""
        self.stop()
        if self._replays is not None:
            self._replays.close()
            self._replays = None

    def ready(self, replays: bool) -> None:
        """Between tests, before the next one's time starts: wait for an executor that is still
        starting (the kit's conftest starts it while pytest collects), and with ``replays`` (the
        next test runs Triton kernels) start the replay process too, if it is not running. Without
        this the first test of a process, or the first Triton test after a replay process died, was
        charged their start-ups by the grader's watchdog, which counts every process under the
        harness: on a 2-core CPU the base's Triton backward fuzz test was charged 9.3 s first in its
        process and 4.6 s after another Triton test. A start-up that fails is left for the test's
        first call to report."""
        try:
            if self.process is not None and not self._greeted:
                self.start()
            if replays:
                replay = self.replays().process
                if replay.process is None:
                    replay.start()
        except ExecutorFailure:
            pass

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
        if self._tag == "triton":
            self._last_graph = graph["id"]
        inputs = [t for t in self._inputs if t.requires_grad]
        if not inputs or not torch.is_grad_enabled():
            weakref.finalize(tensor, self.released, self.generation, True, graph["id"])
            return tensor
        output = stand_in_graph(self, tensor, graph["id"], inputs)
        weakref.finalize(output, self.released, self.generation, True, graph["id"])
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
        if self._autotune_config is not None and (self._autotune_ops is None or message.get("op") in self._autotune_ops):
            message["autotune"] = f"config:{self._autotune_config}"
        elif self.tune:
            message["autotune"] = "full"
        if self.timing:
            message["timing"] = True
        self._released_handles.clear()
        self._released_graphs.clear()
        sent = time.monotonic()
        try:
            self._sent_max = max(self._sent_max, send_frame(self._to, message))
            if message.get("watch"):  # the replay process starts (imports torch) while the executor computes
                replay = self.replays().process
                if replay.process is None:
                    replay.start(wait=False)
            limit = max(reply_limit(self._sent_max), reply_bytes)
            if message.get("watch"):  # the launch record holds the inputs and outputs of every launch too
                limit = max(limit, REPLY_BASE_BYTES + 12 * self._sent_max)
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
        began = time.monotonic()
        self._noted = {"request": round(began - sent, 3)}
        launches = reply.get("launches") or []
        if not (isinstance(launches, list) and all(isinstance(x, list) and len(x) == 2 and all(isinstance(v, str) for v in x)
                                                   for x in launches)):
            raise self._fail("the process running the submission sent a malformed launch record")
        self.launches += [tuple(x) for x in launches]
        self._count_configs({(file, name) for name, file in launches}, reply.get("autotune_configs"))
        if "error" in reply:
            if breaks_the_process(reply["error"]):
                self.fresh_after_test = True
            raise _stand_in(reply["error"], self.settings.limits)
        self._tag = tag
        self._last_graph = None
        try:
            value = self.codec.decode(reply.get("ok"))
            decoding = time.monotonic()
            record = self.codec.decode(reply["replay"]) if message.get("watch") and "replay" in reply else None
            self._noted["decode_record"] = round(time.monotonic() - decoding, 3)
            self._last_record = record
        except ProtocolError as error:
            raise self._fail(f"the process running the submission sent a malformed value ({error})") from None
        finally:
            self._tag = None
        if message.get("watch") and message.get("op") == "call" and _holds_tensor(value):
            self._check_replay(record, self._forward_call(value), began)
        return value

    _tag: str | None = None
    _noted: dict | None = None  # the last request's phase times, for the replay's staff log
    _last_record: Any = None  # the launch record of the last watched request
    _causal: bool = False

    def _wait_until(self) -> float:
        if self.budget is not None:
            return self.budget.wall_deadline()
        return time.monotonic() + START_TIMEOUT_S * 10

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

    def call(self, target: int | str, attr: str | None, args: tuple, kwargs: dict, tag: str | None = None) -> Any:
        self._call_args = (args, kwargs)
        encoded = self._encode_args([list(args), kwargs])
        return self.request({"op": "call", "target": target, "attr": attr, "args": encoded[1][0],
                             "kwargs": encoded[1][1], "grad": torch.is_grad_enabled(), "watch": tag == "triton"}, tag)

    def probe(self, name: str, *args, tag: str | None = None, **kwargs) -> Any:
        from executor.probes import find  # the harness's own copy: its reply limit is read here, not in the executor

        encoded = self._encode_args([list(args), kwargs])
        return self.request({"op": "probe", "name": name, "args": encoded[1][0], "kwargs": encoded[1][1],
                             "grad": torch.is_grad_enabled()}, tag, getattr(find(name), "reply_bytes", 0))

    def getattr(self, target: int, name: str, tag: str | None) -> Any:
        return self.request({"op": "getattr", "target": target, "name": name}, tag)

    def saved_tensors(self, link: GraphLink) -> tuple[torch.Tensor, ...]:
        """Copies of what the executor's graph node behind ``link`` saved for its backward."""
        if link.generation != self.generation:
            raise ExecutorFailure("the submission's process was restarted since this output was computed")
        saved = self.request({"op": "saved", "graph": link.graph_id})
        if not isinstance(saved, list) or not all(isinstance(t, torch.Tensor) for t in saved):
            raise ExecutorFailure("the submission's process sent saved tensors that are not tensors")
        return tuple(saved)

    def backward(self, link: GraphLink, grad: torch.Tensor) -> list:
        if link.generation != self.generation:
            raise ExecutorFailure("the submission's process was restarted since this output was computed")
        self._inputs = []
        saved = self._triton_graphs.get(link.graph_id)
        message = {"op": "backward", "graph": link.graph_id, "grad": self.codec.encode(grad)}
        if saved is not None:
            message["watch"] = True
        grads = self.request(message)
        if not isinstance(grads, list) or len(grads) != link.n_inputs or not all(
                g is None or isinstance(g, torch.Tensor) for g in grads):
            raise ExecutorFailure(f"the backward sent {type(grads).__name__} instead of {link.n_inputs} gradients")
        if saved is not None:  # the grader's time from here on: the truth it needs (L, D) and the replay
            began = time.monotonic()
            call = self._backward_call(saved, grad, grads)
            self._noted["truth"] = round(time.monotonic() - began, 3)
            self._check_replay(self._last_record, call, began)
        return grads


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def breaks_the_process(error: Any) -> bool:
    """Whether an error the submission raised may leave its process in a state that breaks later
    tests (see ``Executor.end_test``): it went through Triton (its traceback names a file of the
    triton package, or a Triton error class), or it is a CUDA error (CUDA's sticky errors, such
    as an illegal memory access, break the process's CUDA context for good)."""
    if not isinstance(error, dict):
        return False
    trace = str(error.get("traceback", ""))
    kind = str(error.get("type", ""))
    message = str(error.get("message", ""))
    return (kind.startswith("triton.") or "/triton/" in trace or "InterpreterError" in trace
            or kind == "torch.AcceleratorError" or "CUDA error" in message or "CUDA error" in trace)


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
            limit = describe_limit("as_bytes", (limits or {}).get("as_bytes"))
            stand_in.add_note("The submission ran out of memory" + (f": it went past {limit} that the grader "
                              "gives the process running it" if limit else "") + ".")
    trace = str(error.get("traceback", ""))
    if trace:
        stand_in.add_note(f"raised in the submission's process ({kind}):\n{trace.rstrip()}")
    return stand_in
