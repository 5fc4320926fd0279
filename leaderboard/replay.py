"""The parent's replay of the worker's launch record: is the forward the submission's Triton, and
how long do its kernels take? Decided outside the worker, in a process that runs only kernels.

Read by ``verdict.py`` (which calls ``replay_verdict`` once the worker has finished) and by staff
reading the README ("What the parent checks itself").

The worker writes down every launch of the submission's ``@triton.jit`` kernels in one eager
forward and backward on the gate's inputs (``worker.Evaluation.launch_record``): the kernel, its
grid and options, and each argument, tensors as views of numbered storages. A storage is named
as one of the gate's inputs (Q, K, V, dO), as a constant, or as unknown. The record is the
worker's word and is used only as a script:

1. The parent fills each storage itself: an input with its own values of that input (from its
   seed), a constant with that constant, anything else with NaN.
2. The grader's replay process (``executor/replay_server.py``: kernels-only modules that
   the parent writes from its own copy of the source, cut-down builtins, a user of its own)
   replays the forward's launches. Some tensor they were passed must hold O, within the tests'
   tolerance of the parent's float64 reference, or the run is refused ``not_replayed``.
3. The same process times the recorded launches, forward and backward, back to back on those
   values (``do_bench``; the forward's alone if the whole sequence cannot run, such as a
   backward that reads a value PyTorch computed). The official time may not be more than
   ``config.Limits.faster_than_kernels`` below that time: ``faster_than_kernels``.

So the accepted time is at least the time of the submission's own kernels computing the
attention on the parent's inputs, measured where the submission runs no Python. A submission
that behaves when it is recorded and does something faster when it is timed is refused by step
3 whenever its recorded kernels are slower than what it timed; a backward written in PyTorch
(allowed: §2.5) is outside the replay, which then times the forward's kernels only.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from leaderboard.detectors import Refusal

INPUTS = ("Q", "K", "V", "dO")


@dataclass
class ReplayResult:
    """What the replay found: a refusal (or None), the replayed kernels' median time (None where
    not measured) and what was timed."""

    refusal: Refusal | None
    kernels_ms: float | None = None
    timed: str = ""


def storages_for(record: dict, inputs: dict[str, torch.Tensor]) -> list[dict]:
    """The replay's storages: the parent's own values for a named input, a constant as it was,
    NaN for anything else. An input whose storage does not fit its tensor starts as NaN too."""
    storages = []
    for spec in record["storages"]:
        init = spec.get("init") if isinstance(spec, dict) else None
        entry = {"nbytes": spec["nbytes"], "dtype": spec["dtype"], "init": ["poison"]}
        if isinstance(init, list) and init[:1] == ["const"] and len(init) == 2:
            entry["init"] = ["const", init[1]]
        elif isinstance(init, list) and init[:1] == ["input"] and len(init) == 2 and init[1] in inputs:
            value = inputs[init[1]].detach().contiguous()
            if str(value.dtype).removeprefix("torch.") == spec["dtype"] and value.numel() * value.element_size() == spec["nbytes"]:
                entry["init"] = ["fill", [[0, [value.numel()], [1], spec["dtype"], value.reshape(-1).cpu()]]]
        storages.append(entry)
    return storages


def check_record(record) -> None:
    """Raise ``wire.ProtocolError`` unless ``record`` is a launch record the replay can take."""
    from harness.replay import _check_record
    from executor.wire import ProtocolError

    if not (isinstance(record, dict) and isinstance(record.get("storages"), list)):
        raise ProtocolError("a malformed launch record")
    for spec in record["storages"]:
        init = spec.get("init") if isinstance(spec, dict) else None
        if not (isinstance(init, list) and init and (init == ["unknown"] or (len(init) == 2 and (
                init[0] == "const" or (init[0] == "input" and init[1] in INPUTS))))):
            raise ProtocolError("a malformed storage in the launch record")
    _check_record({"launches": record.get("launches"),
                   "storages": [{**spec, "init": ["const", 0]} for spec in record["storages"]]})


def replay_verdict(record: dict | None, forward: int, sources: dict[str, str], inputs: dict[str, torch.Tensor],
                   reference_O: torch.Tensor, *, time_ms: float | None, uid: int | None, allowance: float,
                   rep_ms: int, interpret: bool = False) -> ReplayResult:
    """Steps 1-3 of the module docstring. ``inputs``: the parent's gate inputs; ``reference_O``:
    its float64 O on them; ``time_ms``: the official time (None: no time check, as with ``--cpu``);
    ``uid``: the user the replay runs as (None: this one); ``interpret``: replay under Triton's
    interpreter (``--cpu``)."""
    from confine.views import why_unreadable
    from harness.process import ExecutorSettings
    from harness.replay import Call, Replays
    from executor.wire import ProtocolError

    try:
        check_record(record)
    except ProtocolError as error:
        return ReplayResult(Refusal("not_replayed", f"the worker's launch record cannot be replayed ({error})"))
    launches = record["launches"]
    if not 0 < forward <= len(launches):
        return ReplayResult(Refusal(
            "not_replayed", "the forward launched none of the submission's @triton.jit kernels: the attention must "
            "be computed by the submission's own kernels"))
    storages = storages_for(record, inputs)
    if uid is not None and (why := why_unreadable(uid, uid)):  # what no view can open (confine/views.py)
        return ReplayResult(Refusal("not_replayed", f"the parent cannot replay the kernels here: {why}"))
    python_env = {"TRITON_INTERPRET": "1"} if interpret else {}
    with tempfile.TemporaryDirectory(prefix="cs336-leaderboard-replay-") as work:
        Path(work).chmod(0o711)  # the replay's user traverses it to its own folder (process.py makes that)
        replays = Replays(sources, ExecutorSettings(submission=Path(work), workdir=Path(work) / "replay",
                                                    uid=uid, gid=uid, extra_env=python_env))
        try:
            reply = replays.run({"op": "replay", "launches": launches[:forward], "storages": storages})
            finals = reply.get("ok", {}).get("storages") if isinstance(reply.get("ok"), dict) else None
            if not isinstance(finals, list) or len(finals) != len(storages):
                why = reply.get("error", {}).get("message", "no reason given") if isinstance(reply.get("error"), dict) else "no reply"
                return ReplayResult(Refusal("not_replayed", f"the replay of the forward's launches failed: {str(why)[:600]}"))
            views = replays.views(launches[:forward], finals)
            call = Call(known={}, outputs={"O": reference_O.to(inputs["Q"].dtype)}, d=int(inputs["Q"].shape[-1]))
            if not replays.found(call.outputs["O"], views, call, "O"):
                names = ", ".join(sorted({launch["name"] for launch in launches[:forward]}))
                return ReplayResult(Refusal(
                    "not_replayed", f"the parent replayed the forward's launches ({names}) on its own inputs, in a "
                    "process that runs only the submission's kernels, and no tensor they were passed holds O: the "
                    "attention must be computed by the submission's own @triton.jit kernels"))
            if time_ms is None:
                return ReplayResult(None)
            kernels_ms, timed = None, ""
            for part, label in ((launches, f"all {len(launches)} launches"), (launches[:forward], f"the forward's {forward} launches")):
                reply = replays.run({"op": "time", "launches": part, "storages": storages, "rep_ms": rep_ms})
                ms = reply.get("ok", {}).get("ms") if isinstance(reply.get("ok"), dict) else None
                if isinstance(ms, float) and ms > 0:
                    kernels_ms, timed = ms, label
                    break
        finally:
            replays.close()
    return ReplayResult(check_kernel_time(time_ms, kernels_ms, allowance, timed), kernels_ms, timed)


def check_kernel_time(time_ms: float, kernels_ms: float | None, allowance: float, timed: str) -> Refusal | None:
    """Step 3: refuse an official time more than ``allowance`` below the replayed kernels' time."""
    if kernels_ms is None or time_ms >= (1.0 - allowance) * kernels_ms:
        return None
    return Refusal(
        "faster_than_kernels", f"the official time, {time_ms:.3f} ms, is more than {allowance:.0%} below the "
        f"{kernels_ms:.3f} ms that the submission's own kernels took ({timed}, replayed by the parent on its own "
        "inputs): what was timed is not the work of the kernels that computed the attention")
