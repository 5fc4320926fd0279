"""The parent's judgement: a record computed from what the parent can check itself.

Staff read this file to know what decides an acceptance. The worker runs student code, so
everything it says may be forged; the parent accepts a run only on evidence it checks:

* **The order of the messages** (``worker``'s docstring lists it). A message out of order, of
  an unknown type or with malformed fields, a second message after the last, or a pipe that
  breaks mid-frame, is refused as ``protocol``; a worker that exits without its last message
  (a crash, ``os._exit``, a signal) as ``error``; one over its time limit as ``timeout``.
* **Correctness, in the parent.** The parent chose the seed; it draws the same inputs as the
  worker (``gate.check_inputs``), computes the float64 reference itself (on the GPU when there
  is one) and compares the O, dQ, dK and dV the worker sent (``incorrect``), and the fresh-input
  outputs, one batch element per call (``cached_outputs``).
* **Timing brackets.** The parent stamps "timing starts" and "timing ends" on arrival with its
  own clock. The per-call times a worker reports were measured (CUDA events, or the host clock
  in a ``--cpu`` run) on calls made one after another between those two messages, so their sum cannot
  exceed the parent's bracket, except by the delay between the worker writing the first message
  and the parent stamping it (``config.BRACKET_SLACK_MS``, ``BRACKET_SLACK_REL``). A larger sum
  is refused as ``forged_timing``: a worker cannot report more timed work than the time it was
  given. The median is the parent's, computed from the list (and ``median * n / 2 <= sum``).
  What the bracket cannot prove is how many calls ran in it: a worker that idles to fill its
  bracket can still report calls faster than they were, down to the next bound.
* **The floor, in the parent.** The parent measures the bf16 matmul rate itself after the
  worker has exited; a time below FLOPs / that rate is refused (``below_floor``).
* **The submission's Triton**, by names the parent parsed from its own copy of the source
  (``kernels.submission_triton_names``), applied to the profile the worker sends.
* Whatever the worker concludes itself (``refused``, with any code of ``detectors.REASONS``)
  is recorded as a refusal. Nothing it says is a reason to accept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from leaderboard import config
from leaderboard.detectors import REASONS, Refusal, check_fixed_vs_fresh, check_floor, check_ones_vs_random
from leaderboard.protocol import Message

WORKER_REFUSALS = set(REASONS) - {"protocol", "forged_timing", "timeout", "not_replayed", "faster_than_kernels"}


@dataclass
class Observed:
    """What the parent saw of one worker: its messages (stamped on arrival), a broken frame if
    any, and how the process ended (``exit_status`` None when it was killed at the limit)."""

    messages: list[Message]
    protocol_error: str | None = None
    exit_status: int | None = 0
    timed_out: bool = False
    timeout_s: float = 0.0


@dataclass
class Run:
    """What the parent asked for: the mode, the number of official timings, the seed of every
    checked input, and the submission's Triton kernel names (from its own copy)."""

    mode: str
    repeats: int
    seed: int
    triton_names: set[str]

    @property
    def problem(self) -> config.Problem:
        return config.CPU_PROBLEM if self.mode == "cpu" else config.LEADERBOARD

    @property
    def limits(self) -> config.Limits:
        return config.LIMITS_CPU if self.mode == "cpu" else config.LIMITS


class Violation(Exception):
    """A message that breaks the protocol (the text says how)."""


def expected_script(run: Run) -> list[tuple[str, str | None]]:
    """(type, label) of every message a finished worker sends, in order."""
    script = [("hello", None), ("gate", None), ("launches", None)]
    script += [("fresh", f"fresh_{i + 1}") for i in range(run.limits.fresh_input_repeats)]
    script += [("timing_start", "fresh_inputs"), ("timing_end", "fresh_inputs"), ("profile", None)]
    for label in [f"official_{i + 1}" for i in range(run.repeats)] + ["random_dO"]:
        script += [("timing_start", label), ("timing_end", label)]
    return script + [("done", None)]


@dataclass
class Judgement:
    """The record's verdict fields, filled as the messages are checked."""

    refusals: list[dict] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)
    fields: dict = field(default_factory=dict)
    timings: dict[str, list[float]] = field(default_factory=dict)
    finished: bool = False
    launch_record: dict | None = None  # the worker's record of one forward and backward (replayed by the parent)
    forward_launches: int = 0  # how many of its launches are the forward's

    def refuse(self, refusal: Refusal | None) -> None:
        if refusal is not None:
            self.refusals.append(refusal.as_dict())

    def passed(self, check: str, refusal: Refusal | None) -> None:
        if refusal is None:
            self.checks[check] = "passed"
        else:
            self.refuse(refusal)


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise Violation(what)


def _finite_list(values, what: str, max_len: int = 1_000_000) -> list[float]:
    _require(isinstance(values, list) and 0 < len(values) <= max_len, f"{what} is not a non-empty list")
    _require(
        all(type(v) in (int, float) and math.isfinite(v) and v > 0 for v in values), f"{what} holds a value that is not a positive number"
    )
    return [float(v) for v in values]


def check_timing(label: str, times_ms: list[float], bracket_ms: float) -> Refusal | None:
    """Refuse per-call times that add up to more than the parent's bracket allows (see the
    module docstring)."""
    total = sum(times_ms)
    allowed = bracket_ms * (1.0 + config.BRACKET_SLACK_REL) + config.BRACKET_SLACK_MS
    if total <= allowed:
        return None
    return Refusal(
        "forged_timing",
        f"the {len(times_ms)} per-call times reported for {label} add up to {total:.1f} ms, but the parent's own "
        f"clock saw only {bracket_ms:.1f} ms between \"timing starts\" and \"timing ends\"",
    )


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def _tensors(message: Message, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
    got = message.tensors
    _require(sorted(got) == ["O", "dK", "dQ", "dV"], f"{message.type} sent tensors {sorted(got)}, not O, dQ, dK, dV")
    for name, tensor in got.items():
        _require(
            tuple(tensor.shape) == shape and tensor.dtype == dtype,
            f"{message.type}: {name} has shape {tuple(tensor.shape)} and dtype {tensor.dtype}; expected {shape}, {dtype}",
        )
    return {name: tensor.to(device) for name, tensor in got.items()}


def check_gate(message: Message, run: Run, judgement: Judgement) -> None:
    """The correctness gate, recomputed in the parent on the inputs its seed gives."""
    from leaderboard.gate import check_inputs, compare_all
    from harness.flash_reference import attention_float64
    from harness.flash_tolerances import GATE_TOLERANCES

    p = run.problem
    got = _tensors(message, p.shape, p.dtype, p.device)
    q, k, v, do = check_inputs(p, run.seed, "gate", 4).unbind(0)
    want = attention_float64(q, k, v, p.is_causal, do)
    comparisons = compare_all(got, want, GATE_TOLERANCES[p.dtype])
    judgement.fields["gate"] = {c.name: c.as_dict() for c in comparisons}
    problems = [c.problem for c in comparisons if c.problem]
    judgement.passed("incorrect", Refusal("incorrect", "; ".join(problems)) if problems else None)


def check_fresh(message: Message, label: str, run: Run, judgement: Judgement) -> None:
    """One fresh-input call, compared in the parent on the batch element its seed picks."""
    from leaderboard.gate import check_inputs, checked_batch_element, compare_all
    from harness.flash_reference import attention_float64
    from harness.flash_tolerances import GATE_TOLERANCES

    p = run.problem
    b = checked_batch_element(p, run.seed, label)
    _require(message.header.get("batch") == b, f"fresh {label} reports batch element {message.header.get('batch')!r}, not {b}")
    got = _tensors(message, (1, p.n, p.d), p.dtype, p.device)
    q, k, v = check_inputs(p, run.seed, label, 3)[:, b : b + 1].unbind(0)
    want = attention_float64(q, k, v, p.is_causal, torch.ones_like(q))
    problems = [c.problem for c in compare_all(got, want, GATE_TOLERANCES[p.dtype]) if c.problem]
    if problems:
        judgement.refuse(
            Refusal(
                "cached_outputs",
                f"{label} (fresh random inputs) does not match the reference on batch element {b}: {'; '.join(problems)}. "
                "Recompute the outputs on every call.",
            )
        )


def _events(rows, what: str):
    from leaderboard.kernels import ProfiledEvent

    _require(isinstance(rows, list) and len(rows) <= 100_000, f"profile {what} is not a list")
    events = []
    for row in rows:
        _require(
            isinstance(row, list)
            and len(row) == 4
            and isinstance(row[0], str)
            and isinstance(row[1], bool)
            and type(row[2]) in (int, float)
            and math.isfinite(row[2])
            and row[2] >= 0,
            f"profile {what} has a malformed row",
        )
        events.append(ProfiledEvent(row[0], row[1], float(row[2])))
    return events


def check_profile(message: Message, run: Run, judgement: Judgement) -> None:
    """Library attention and the submission's Triton, by the parent's kernel names."""
    from leaderboard.kernels import check_library_attention, check_triton_launched, check_triton_share, top_kernels, triton_share

    forward = _events(message.header.get("forward"), "forward")
    both = _events(message.header.get("both"), "forward + backward")
    launched = message.header.get("launched")
    _require(isinstance(launched, list) and all(isinstance(x, str) for x in launched), "profile launched is not a list of names")
    names = run.triton_names
    judgement.fields["forward_kernels_us"] = top_kernels(forward)
    judgement.fields["kernels_us"] = top_kernels(both)
    judgement.passed("library_attention", check_library_attention(forward + both, names))
    if run.mode == "cpu":
        judgement.passed("not_triton", check_triton_launched(launched, names))
        return
    triton_us, total_us = triton_share(forward, names)
    if total_us <= 0:
        judgement.refuse(Refusal("not_triton", "the profile of the forward holds no GPU kernel, so its Triton share is unknown"))
        return
    judgement.fields["triton_share_forward"] = triton_us / total_us
    judgement.passed("not_triton", check_triton_share(forward, names, run.limits.min_triton_share_forward))


def check_message(message: Message, expected: tuple[str, str | None], previous: Message | None, run: Run, judgement: Judgement) -> None:
    """Check one message against the script position ``expected``; raises Violation."""
    kind, label = expected
    if message.type == "refused":
        _require(kind != "hello", "refused came before hello")
        refusals = message.header.get("refusals")
        _require(isinstance(refusals, list) and refusals, "refused names no reason")
        for r in refusals:
            _require(
                isinstance(r, dict) and r.get("code") in WORKER_REFUSALS and isinstance(r.get("message"), str),
                f"refused gives a malformed reason {str(r)[:200]}",
            )
            judgement.refusals.append({"code": r["code"], "message": r["message"][:4000]})
        _take_worker_notes(message, judgement)
        judgement.finished = True
        return
    _require(message.type == kind, f"expected {kind}{f' ({label})' if label else ''}, got {message.type[:40]!r}")
    if label is not None and kind != "fresh":
        _require(message.header.get("label") == label, f"{kind} is labelled {str(message.header.get('label'))[:40]!r}, not {label!r}")
    if kind != "gate" and kind != "fresh":
        _require(not message.tensors, f"{kind} carries tensors")
    if kind == "gate":
        check_gate(message, run, judgement)
    elif kind == "fresh":
        _require(message.header.get("label") == label, f"fresh is labelled {str(message.header.get('label'))[:40]!r}, not {label!r}")
        check_fresh(message, label, run, judgement)
    elif kind == "timing_end":
        times = _finite_list(message.header.get("times_ms"), f"the times of {label}")
        bracket_ms = 1e3 * (message.received - previous.received)
        judgement.fields.setdefault("brackets", {})[label] = {"bracket_ms": bracket_ms, "sum_ms": sum(times), "calls": len(times)}
        judgement.passed("forged_timing", check_timing(label, times, bracket_ms))
        judgement.timings[label] = times
    elif kind == "launches":
        record, forward = message.header.get("record"), message.header.get("forward")
        _require(isinstance(record, dict) and type(forward) is int and forward >= 0, "launches is malformed")
        judgement.launch_record, judgement.forward_launches = record, forward
    elif kind == "profile":
        check_profile(message, run, judgement)
    elif kind == "done":
        _take_worker_notes(message, judgement)
        judgement.finished = True


def _take_worker_notes(message: Message, judgement: Judgement) -> None:
    """Keep what the worker noted (its own checks, the function's name, the probe, a traceback),
    as information only."""
    checks = message.header.get("checks", {})
    info = message.header.get("info", {})
    if isinstance(checks, dict):
        for check, note in checks.items():
            if isinstance(check, str) and isinstance(note, str) and check in REASONS:
                judgement.checks.setdefault(check, note[:200])
    if isinstance(info, dict):
        for key in ("function", "probe", "traceback"):
            if key in info:
                judgement.fields[key] = info[key] if key == "probe" else str(info[key])[:6000]


def timing_verdicts(run: Run, judgement: Judgement, matmul) -> None:
    """The verdicts that need the times: cached outputs, dO = ones, the floor (by the parent's
    own matmul rate, ``matmul()`` -> (TFLOP/s, label))."""
    p = run.problem
    official = [judgement.timings[f"official_{i + 1}"] for i in range(run.repeats)]
    medians = [median(times) for times in official]
    time_ms = median(medians)
    flops = config.attention_flops(p.batch, p.n, p.d, p.is_causal)
    matmul_tflops, label = matmul()
    floor_ms = flops / (matmul_tflops * 1e12) * 1e3
    fresh_ms = median(judgement.timings["fresh_inputs"])
    random_ms = median(judgement.timings["random_dO"])
    first = sorted(official[0])
    quartile = lambda q: first[min(len(first) - 1, int(q * (len(first) - 1) + 0.5))]  # noqa: E731
    tflops = flops / (time_ms * 1e-3) / 1e12
    judgement.fields.update(
        time_ms=time_ms,
        repeat_ms=medians,
        repeat_spread_pct=100.0 * (max(medians) - min(medians)) / min(medians) if len(medians) > 1 else None,
        iqr_pct=100.0 * (quartile(0.75) - quartile(0.25)) / medians[0],
        calls_timed=[len(times) for times in official],
        random_dO_ms=random_ms,
        fresh_inputs_ms=fresh_ms,
        flops=flops,
        tflops=tflops,
        matmul_tflops=matmul_tflops,
        matmul=label,
        pct_of_matmul=100.0 * tflops / matmul_tflops,
        floor_ms=floor_ms,
    )
    judgement.passed("cached_outputs", check_fixed_vs_fresh(time_ms, fresh_ms, run.limits.fixed_faster_than_fresh))
    judgement.passed("ones_dO", check_ones_vs_random(time_ms, random_ms, run.limits.ones_faster_than_random))
    judgement.passed("below_floor", check_floor(time_ms, floor_ms, flops, matmul_tflops, label))


def judge(observed: Observed, run: Run, matmul, replay=None) -> Judgement:
    """Check every message in order (see the module docstring); ``matmul()`` measures the
    parent's matmul rate, called only when a worker finished with every timing; ``replay(record,
    forward, time_ms)`` (``replay.replay_verdict``, bound by the parent; None: not replayed, for
    the leaderboard's in-process tests) judges the launch record then."""
    judgement = Judgement()
    script = expected_script(run)
    position = 0
    try:
        for index, message in enumerate(observed.messages):
            _require(not judgement.finished, f"{message.type[:40]!r} came after the worker's last message")
            _require(position < len(script), "more messages than the protocol has")
            previous = observed.messages[index - 1] if index else None
            check_message(message, script[position], previous, run, judgement)
            position += 1
        if observed.protocol_error:
            raise Violation(observed.protocol_error)
    except Violation as violation:
        judgement.refusals.append({"code": "protocol", "message": f"the worker broke the protocol: {violation}"})
        judgement.finished = True
    if observed.timed_out:
        judgement.refusals.append({"code": "timeout", "message": f"the run did not finish within {observed.timeout_s:.0f} s"})
    elif not judgement.finished:
        judgement.refusals.append(
            {
                "code": "error",
                "message": f"the worker exited with status {observed.exit_status} before its last message (a crash, "
                "os._exit, a signal or running out of memory); see its output above",
            }
        )
    elif observed.exit_status != 0:
        judgement.refusals.append({"code": "error", "message": f"the worker exited with status {observed.exit_status}"})
    if not judgement.refusals and position == len(script):
        timing_verdicts(run, judgement, matmul)
        if replay is not None:
            result = replay(judgement.launch_record, judgement.forward_launches,
                            None if run.mode == "cpu" else judgement.fields["time_ms"])
            judgement.fields.update(kernels_ms=result.kernels_ms, kernels_timed=result.timed)
            judgement.passed("not_replayed", result.refusal if result.refusal and result.refusal.code == "not_replayed" else None)
            if result.kernels_ms is not None:  # timed (on a GPU)
                judgement.passed("faster_than_kernels",
                                 result.refusal if result.refusal and result.refusal.code == "faster_than_kernels" else None)
    elif not judgement.refusals:  # cannot happen: finished means done or refused
        judgement.refusals.append({"code": "protocol", "message": "the worker ended without every step"})
    # The worker's own refusal often repeats the parent's (both judged the same profile): once each.
    unique = {(r["code"], r["message"]): r for r in judgement.refusals}
    judgement.refusals = list(unique.values())
    return judgement
