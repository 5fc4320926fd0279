"""Is this call's attention computed by the submission's own Triton kernels? A replay decides.

Read by ``client.py``, which checks every call of the Triton Function (and every backward of
one) here before the test sees its outputs, and by staff reading the threat model. This is the
harness's side; ``executor/replay_server.py`` is the process that runs the kernels.

1. The executor reports the call's launches (``launches.LaunchRecord``): kernel, grid, options,
   and each argument, tensors as views of numbered storages with their contents just before
   their first launch. The report is the submission's word, and is used only as a script.
2. The harness decides what each storage holds when the replay starts. A constant stays that
   constant (``torch.zeros`` for an atomic dQ, a NaN-filled ``torch.empty``). Other values come
   in only where the harness can compute them itself, and then it is the harness's values that
   come in: the inputs (Q, K, V; and for the backward O, dO, L, D = rowsum(dO * O)), or a
   copy, cast, transpose, reshape or scaling by a handout constant of one. The backward's saved
   L may also be the L that the replay of the call's forward computed (the kernels' work, on the
   harness's inputs, in the replay process). Anything else starts as NaN (``UNKNOWN``).
3. A process that runs none of the submission's Python (``executor/replay_server.py``: the kernels-only
   modules of ``kernels_only.py``, which the harness wrote from its own reading of the source)
   replays the launches on those values, with each autotuned kernel's config taken from the
   source where a test checks config n.
4. The outputs the test gets (O; dQ, dK, dV) must each be found in the replay: some tensor a
   replayed kernel was passed must hold it, within the test's own tolerance (a cast, a reshape
   and a handout scale factor allowed). Otherwise the call earns no Triton credit.

Nothing the submission's process holds decides anything here: a forged record can only name
the submission's own kernels, which must then compute the attention, on the harness's values,
where no code of the submission but its kernels runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from executor.launches import storage_view
from executor.wire import DTYPES, Closed, ProtocolError, TimedOut, recv_frame, send_frame

from . import kernels_only
from .process import ExecutorFailure, ExecutorProcess, ExecutorSettings

__tracebackhide__ = True  # pytest leaves the replay's frames out of a failure's traceback: its message is the verdict

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
REPLAY_TIMEOUT_S = 300.0  # a replay's wall-clock limit: its compiles included
REPLAY_REPLY_BYTES = 1 << 31
_MATCH_TOLERANCE = {torch.float32: (1e-3, 1e-4), torch.float64: (1e-6, 1e-8), torch.float16: (1e-2, 2e-3),
                    torch.bfloat16: (3e-2, 1e-2)}


class NoCredit(AssertionError):
    """The call's outputs are not the work of the submission's Triton kernels (the message says why)."""


def scales(d: int) -> tuple[float, ...]:
    """The factors a launcher may apply around its kernels: the handout's 1/sqrt(d), log2(e), ln(2), and their products."""
    s = 1.0 / math.sqrt(d)
    return (1.0, s, 1.0 / s, LOG2E, s * LOG2E, 1.0 / LOG2E, LN2, s * LN2, 1.0 / LN2)


@dataclass
class Call:
    """What the harness knows of one call: its own inputs and the outputs the executor returned.

    ``known``: {name: tensor} the harness may let into a replay (Q, K, V; for the backward also O,
    dO, L, D); ``outputs``: {name: tensor} the replay must reproduce; ``d``: the head dim."""

    known: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    d: int
    config: int | None = None  # the test's autotune config index (None: the autotuner's own choice)
    what: str = "forward"
    # after a check: every tensor the replayed kernels were passed, as the replay left it (a
    # forward's replayed L is what its backward may be given: see triton_credit.py ``_backward_call``)
    replayed: list[torch.Tensor] = field(default_factory=list)


def value_scale(call: Call, name: str) -> float:
    """What ``name``'s absolute tolerance is multiplied by: the root mean square of V (at least 1)
    for the outputs that grow with V (O, dQ, dK), else 1. The tests scale their own tolerance the
    same way (harness/flash_cases.py ``case_tolerance``, by the case's ``v_scale``): with |V|
    near 1e5, float32 rounding alone moves a near-zero element of dQ by 0.02 to 0.1, so an
    unscaled atol of 0.01 failed correct kernels (the base's hidden beyond_float16[triton] test)."""
    V = call.known.get("V")
    if name not in ("O", "dQ", "dK") or not isinstance(V, torch.Tensor) or V.numel() == 0:
        return 1.0
    return max(1.0, float(V.detach().to(torch.float64).pow(2).mean().sqrt()))


def _shape_candidates(base: torch.Tensor, shape: tuple[int, ...]) -> list[tuple[str, torch.Tensor]]:
    found = []
    if tuple(base.shape) == shape:
        found.append(("", base))
    if base.dim() >= 2:
        transposed = base.transpose(-1, -2)
        if tuple(transposed.shape) == shape:
            found.append((" transposed", transposed))
    if base.numel() == math.prod(shape) and tuple(base.shape) != shape:
        found.append((" reshaped", base.reshape(shape)))
    return found


def _close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    both_nan = torch.isnan(actual) & torch.isnan(expected)
    diff = (actual - expected).abs()
    return bool(((diff <= atol + rtol * expected.abs()) | both_nan).all())


SAMPLE = 4096  # elements compared first, before a whole tensor is (a large record's match took seconds)


def _sample(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.reshape(-1)
    step = max(1, flat.numel() // SAMPLE)
    return flat[::step][:SAMPLE]


def match_tolerance(name: str, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) within which ``view`` of ``dtype`` is recognised as the harness's ``name``.

    A cast's rounding, for every name. For L, also the tests' own allowance for the saved L
    (harness/flash_tolerances.py): L is the submission's forward's work, never a tensor the
    harness handed over, and a correct forward with tf32 dots on a GPU saves an L off by up to
    1e-2 in float32, which the tests accept. Held to the cast's 1e-4, that L started as NaN and
    the correct base lost every causal Triton backward test on an H100 (2026-12-06: rows that
    see few keys have an L of one or two scores, with no logsumexp to average the tf32 error).
    Where the forward's replay computed the same L bit for bit (triton_credit.py ``_backward_call``) it
    matches exactly; this tolerance is for an L that no replayed forward reproduces exactly."""
    from harness.flash_tolerances import TOLERANCES, tolerance

    rtol, atol = _MATCH_TOLERANCE.get(dtype, (0.0, 0.0))
    if name == "L" and dtype in TOLERANCES:
        allowed = tolerance(dtype, "L", "triton")
        rtol, atol = max(rtol, allowed.rtol), max(atol, allowed.atol)
    return rtol, atol


def match(view: torch.Tensor, call: Call) -> tuple[str, torch.Tensor] | None:
    """(what it is, the harness's value) if ``view`` holds a value the harness can compute, else None."""
    view = view.cpu()
    for name, base in call.known.items():  # the common case: an input itself, bit for bit
        base = base.detach().cpu()
        if base.dtype == view.dtype and tuple(base.shape) == tuple(view.shape) and torch.equal(base, view):
            return name, base
    values = None
    for name, base in call.known.items():
        rtol, atol = match_tolerance(name, view.dtype)
        for how, candidate in _shape_candidates(base.detach().cpu(), tuple(view.shape)):
            small, small_view = _sample(candidate).to(torch.float64), _sample(view).to(torch.float64)
            norm = float((small * small).sum())
            if norm == 0.0 or not bool(torch.isfinite(small_view).all()):
                continue
            alpha = float((small_view * small).sum()) / norm  # the factor the view is of the candidate
            spread = math.sqrt(small.numel() / norm)  # 1 / the candidate's root mean square
            for factor in scales(call.d):
                # alpha strays from the factor by at most ||error|| / ||candidate|| when every element is
                # within the tolerance (an L near 0 with a tf32 error strays far), and 1e-3 besides
                slack = (1e-3 + rtol) * factor + atol * (factor + 1) * spread
                if abs(alpha - factor) > slack or not _close(small_view, factor * small, rtol, atol * factor + atol):
                    continue
                if values is None:
                    values = view.to(torch.float64)
                    if not bool(torch.isfinite(values).all()):
                        return None
                whole = candidate.to(torch.float64)
                if _close(values, factor * whole, rtol, atol * factor + atol):
                    label = name + how + ("" if factor == 1.0 else f" times {factor:.6g}")
                    return label, (factor * whole).to(view.dtype)
    return None


def _reproduces(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | float) -> bool:
    """Every element within ``bound``, or the same non-finite value (a wrong output is reproduced too)."""
    same = (actual == expected) | (torch.isnan(actual) & torch.isnan(expected))
    return bool((((actual - expected).abs() <= bound) | same).all())


def _check_record(record: Any) -> None:
    """Refuse a record that is not the shape ``launches.LaunchRecord`` writes."""
    if not (isinstance(record, dict) and isinstance(record.get("launches"), list) and isinstance(record.get("storages"), list)):
        raise ProtocolError("a malformed launch record")
    storages = record["storages"]
    for spec in storages:
        if not (isinstance(spec, dict) and type(spec.get("nbytes")) is int and spec["nbytes"] >= 0
                and spec.get("dtype") in DTYPES and isinstance(spec.get("init"), list) and spec["init"]):
            raise ProtocolError("a malformed storage in the launch record")
        init = spec["init"]
        if init[0] == "const":
            if len(init) != 2 or not isinstance(init[1], (int, float, bool)):
                raise ProtocolError("a malformed constant in the launch record")
        elif init[0] == "data":
            if len(init) != 2 or not isinstance(init[1], torch.Tensor) or init[1].dim() != 1 \
                    or init[1].numel() * init[1].element_size() > spec["nbytes"]:
                raise ProtocolError("malformed values in the launch record")
        else:
            raise ProtocolError("a malformed storage in the launch record")

    def tensor_ok(value) -> bool:
        if not (len(value) == 6 and type(value[1]) is int and 0 <= value[1] < len(storages) and type(value[2]) is int
                and value[2] >= 0 and isinstance(value[3], list) and isinstance(value[4], list)
                and len(value[3]) == len(value[4]) and all(type(v) is int and v >= 0 for v in value[3] + value[4])
                and value[5] in DTYPES):
            return False
        size = torch.empty(0, dtype=DTYPES[value[5]]).element_size()
        extent = value[2] + sum((n - 1) * s for n, s in zip(value[3], value[4])) + 1 if all(value[3]) else 0
        return extent * size <= storages[value[1]]["nbytes"]

    for launch in record["launches"]:
        if not (isinstance(launch, dict) and isinstance(launch.get("file"), str) and isinstance(launch.get("name"), str)
                and isinstance(launch.get("grid"), list) and len(launch["grid"]) == 3
                and all(type(g) is int and 0 <= g < 2**31 for g in launch["grid"])
                and isinstance(launch.get("args"), dict) and isinstance(launch.get("options", {}), dict)):
            raise ProtocolError("a malformed launch in the launch record")
        for value in launch["args"].values():
            if isinstance(value, list) and value and value[0] == "tensor" and not tensor_ok(value):
                raise ProtocolError("a tensor outside its storage in the launch record")
            if isinstance(value, list) and value and value[0] == "desc" and not (
                    len(value) == 5 and isinstance(value[1], list) and value[1][:1] == ["tensor"] and tensor_ok(value[1])):
                raise ProtocolError("a malformed tensor descriptor in the launch record")


class Replays:
    """The harness's replays of one submission: its kernels-only modules and the process that runs them."""

    def __init__(self, submission: Path | dict[str, str], settings: ExecutorSettings):
        """``submission``: its folder, or its Python sources ({relative path: text}) as the caller read them."""
        sources = submission if isinstance(submission, dict) else {}
        for path in [] if isinstance(submission, dict) else sorted(Path(submission).rglob("*.py")):
            try:
                sources[path.relative_to(submission).as_posix()] = path.read_text(errors="replace")
            except OSError:
                continue
        self.kernels = kernels_only.build(sources)
        self.tree = Path(tempfile.mkdtemp(prefix="cs336-kernels-only-"))
        (self.tree / "adapters.py").write_text(self.kernels.modules.get("adapters.py", ""))
        (self.tree / "cs336_systems").mkdir()
        for path, text in self.kernels.modules.items():
            target = self.tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.process = ExecutorProcess(replace(settings, submission=self.tree, entry="replay_server",
                                               test_timeout_s=None))

    def run(self, request: dict) -> dict:
        """Send one request to the replay process (``executor/replay_server.py``) and return its reply."""
        return self._run(request)

    def close(self) -> None:
        self.process.stop()
        shutil.rmtree(self.tree, ignore_errors=True)

    # -- one call ----------------------------------------------------------------------

    def check(self, record: Any, call: Call, noted: dict | None = None) -> None:
        """Raise NoCredit unless the replay of ``record`` on the harness's values reproduces ``call.outputs``.
        ``noted``: more of this call's phases, for the staff log."""
        self.phases = {"what": call.what, "launches": len(record.get("launches", [])) if isinstance(record, dict) else 0,
                       **(noted or {})}
        began = time.monotonic()
        try:
            self._check(record, call)
        finally:
            self.phases["total"] = round(time.monotonic() - began, 3)
            log = os.environ.get("CS336_REPLAY_LOG")
            if log:  # a staff diagnostic: where a replay's time goes
                with open(log, "a") as handle:
                    handle.write(json.dumps(self.phases) + "\n")

    def _phase(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - since, 3)
        return now

    def _check(self, record: Any, call: Call) -> None:
        began = time.monotonic()
        _check_record(record)
        launches = record["launches"]
        if not launches:
            raise NoCredit(f"the Triton Function's {call.what} launched none of your @triton.jit kernels: the "
                           "attention must be computed by your own kernels (handout §2.4, §2.5)")
        configured = [self._configured(launch, call) for launch in launches]
        began = self._phase("validate", began)
        storages, unknown = self._initial_storages(record, call)
        began = self._phase("match_inputs", began)
        if configured != launches:
            # Config n of an autotuner, taken from the source: every tensor that holds an output when
            # the launches replay as reported must still hold it with config n (a wrong config
            # cannot hide behind a copy of the output that an earlier kernel wrote).
            as_reported, _ = self._replayed(launches, storages, call)
            with_config, reply = self._replayed(configured, storages, call)  # also the replay judged below
            for name in call.outputs:
                lost = as_reported[name] - with_config[name]
                if lost:
                    raise NoCredit(
                        f"with config {call.config} of your autotuned kernels, taken from your source, the replay "
                        f"of this {call.what} no longer computes {name} where config {call.config} was asked for "
                        f"(the launches as your process ran them do): config {call.config} is wrong, or your "
                        "process did not run it (handout §2.4: every config must be right)")
            began = self._phase("every_config", began)
        else:
            reply = self._run({"op": "replay", "launches": launches, "storages": storages})
        launches = configured
        began = self._phase("replay", began)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise NoCredit(f"the grader replays your kernels' launches on its own inputs, in a process that runs "
                           f"nothing else of your code, and the replay of this {call.what} failed: "
                           f"{str(error.get('message', 'no reason given'))[:600]}")
        finals = reply.get("ok", {}).get("storages") if isinstance(reply.get("ok"), dict) else None
        if not (isinstance(finals, list) and len(finals) == len(storages)
                and all(isinstance(t, torch.Tensor) for t in finals)):
            raise NoCredit("the replay of your kernels returned nothing the grader can read")
        views = self.views(launches, finals)
        call.replayed = views
        for name, output in call.outputs.items():
            found = self.found(output, views, call, name)
            began = self._phase("find_outputs", began)
            if not found:
                hint = f" Values computed outside your kernels started as NaN in the replay: {'; '.join(unknown)}." \
                    if unknown else ""
                raise NoCredit(
                    f"the {call.what}'s {name} is not the work of your Triton kernels: the grader replayed your "
                    f"kernels' launches ({', '.join(sorted({l['name'] for l in launches}))}) on its own inputs, in a "
                    f"process that runs nothing else of your code, and no tensor they were passed holds {name}.{hint} "
                    "PyTorch may check inputs, allocate outputs, copy, cast, transpose or scale inputs, compute "
                    "D = rowsum(dO * O) and launch kernels; the attention and its gradients must come from your "
                    "@triton.jit kernels (handout §2.4, §2.5).")

    def _replayed(self, launches: list[dict], storages: list[dict], call: Call) -> tuple[dict[str, set[int]], dict]:
        """({output name: indices of the launch-argument views that hold it}, the replay's reply)
        after a replay of ``launches``."""
        reply = self._run({"op": "replay", "launches": launches, "storages": storages})
        finals = reply.get("ok", {}).get("storages") if isinstance(reply.get("ok"), dict) else None
        if not isinstance(finals, list) or len(finals) != len(storages):
            return {name: set() for name in call.outputs}, reply
        views = self.views(launches, finals)
        return {name: {i for i, view in enumerate(views) if self.found(output, [view], call, name)}
                for name, output in call.outputs.items()}, reply

    def _configured(self, launch: dict, call: Call) -> dict:
        """The launch with config ``call.config`` of its autotuner, read from the source (not from the executor)."""
        key = (launch["file"], launch["name"])
        configs = self.kernels.autotune.get(key)
        if key not in self.kernels.kernels:
            why = self.kernels.problems.get(key)
            raise NoCredit(f"the {call.what} launched {launch['file']}:{launch['name']}, which the grader cannot "
                           + (f"replay ({why})" if why else "find among your @triton.jit kernels"))
        if call.config is None or not configs or call.config >= len(configs):
            return launch
        config = configs[call.config]
        if key in self.kernels.pruned:  # its pruning is its own Python: the config must at least be one of its configs
            if not any(all(launch["args"].get(k) == v for k, v in c["kwargs"].items()) for c in configs):
                raise NoCredit(f"the {call.what} launched {launch['name']} with constants that are none of its autotune configs")
            return launch
        args = dict(launch["args"])
        args.update(config["kwargs"])
        options = dict(launch.get("options", {}))
        options.update({k: v for k, v in config.items() if k in kernels_only.CONFIG_FIELDS})
        return {**launch, "args": args, "options": options}

    def _initial_storages(self, record: dict, call: Call) -> tuple[list[dict], list[str]]:
        first_views: dict[int, list] = {}
        for launch in record["launches"]:
            for name, value in launch["args"].items():
                tensor = value[1] if isinstance(value, list) and value[:1] == ["desc"] else value
                if isinstance(tensor, list) and tensor[:1] == ["tensor"]:
                    first_views.setdefault(tensor[1], [launch["name"], name, tensor])
        storages, unknown = [], []
        for index, spec in enumerate(record["storages"]):
            init = spec["init"]
            entry = {"nbytes": spec["nbytes"], "dtype": spec["dtype"]}
            if init[0] == "const":
                entry["init"] = ["const", init[1]]
            elif index not in first_views:
                entry["init"] = ["poison"]
            else:
                kernel, argument, (_, _, offset, shape, stride, dtype) = first_views[index]
                view = storage_view(init[1], offset, shape, stride, dtype)
                found = match(view, call) if view.is_floating_point() else None
                if found is None:
                    entry["init"] = ["poison"]
                    unknown.append(f"{argument} of {kernel}")
                else:
                    entry["init"] = ["fill", [[offset, shape, stride, dtype, found[1].contiguous()]]]
            storages.append(entry)
        return storages, unknown

    def views(self, launches: list[dict], finals: list[torch.Tensor]) -> list[torch.Tensor]:
        views, seen = [], set()
        for launch in launches:
            for value in launch["args"].values():
                tensor = value[1] if isinstance(value, list) and value[:1] == ["desc"] else value
                if isinstance(tensor, list) and tensor[:1] == ["tensor"]:
                    key = repr(tensor)
                    if key not in seen:
                        seen.add(key)
                        _, sid, offset, shape, stride, dtype = tensor
                        views.append(storage_view(finals[sid], offset, shape, stride, dtype))
        return views

    def found(self, output: torch.Tensor, views: list[torch.Tensor], call: Call, name: str) -> bool:
        from harness.flash_tolerances import tolerance

        expected = output.detach().to(torch.float64).cpu()
        try:
            tol = tolerance(output.dtype, name, "triton")
        except ValueError:
            return False
        atol = tol.atol * value_scale(call, name)
        bound = atol + tol.rtol * expected.abs() + tol.max_frac * float(expected.abs().max() if expected.numel() else 0)
        small_expected, small_bound = _sample(expected), _sample(bound) if bound.dim() else bound
        for view in views:
            if view.numel() != expected.numel() or not view.is_floating_point():
                continue
            small = _sample(view.reshape(expected.shape)).to(torch.float64)
            for factor in scales(call.d):
                if not _reproduces(small * factor, small_expected, small_bound):
                    continue  # the sample already differs: not this view at this factor
                if _reproduces(view.to(torch.float64).reshape(expected.shape) * factor, expected, bound):
                    return True
        return False

    def _run(self, request: dict) -> dict:
        process = self.process
        try:
            process.start()
            send_frame(process._to, request)
            reply = recv_frame(process._from, time.monotonic() + REPLAY_TIMEOUT_S, REPLAY_REPLY_BYTES)
        except ExecutorFailure as failure:
            process.failure = None
            return {"error": {"message": f"the replay process did not start ({failure})"}}
        except (Closed, BrokenPipeError):
            failure = process._fail("the replay process died", died=True)
            process.failure = None
            return {"error": {"message": str(failure).splitlines()[0]}}
        except TimedOut:
            process._fail("the replay timed out")
            process.failure = None
            return {"error": {"message": f"the replay did not finish within {REPLAY_TIMEOUT_S:.0f} s"}}
        except ProtocolError as error:
            process._fail("the replay sent a malformed reply")
            process.failure = None
            return {"error": {"message": f"the replay sent a malformed reply ({error})"}}
        return reply if isinstance(reply, dict) else {"error": {"message": "a malformed reply"}}
