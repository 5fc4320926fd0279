"""Runs one submission in its own process: every check in order, then the official timing.

Staff read this file to know the order of the checks and what the worker reports. The parent
(``parent``) starts it as root in a fresh sandbox (``worker_setup``); before anything else the worker
drops to the uid the parent leased (``confine``), then reports to the parent only through the
pipe it was given (``protocol``). The parent does not take its word for anything that decides
an acceptance: it recomputes the reference for the outputs the worker sends, brackets every
timing with its own clock, measures the matmul rate itself and finds the submission's Triton
kernels in its own copy of the source (``verdict``). What the worker concludes by itself can
only refuse.

Order, and why:

1. capture the clocks and snapshot the watched names, then import the submission;
   check nothing was patched by the import;
2. one eager call of ``Fn.apply`` at the problem shape: plain-tensor output and gradients of
   the right shape and dtype (catches subclassed and lazy outputs before torch.compile sees them);
3. ``flash = torch.compile(Fn.apply)``; the correctness gate under a random dO on inputs drawn
   from the parent's seed, inputs checked for in-place changes; O, dQ, dK, dV go to the parent;
   then one eager forward and backward on the same inputs, its launches written down for the
   parent's replay (``launch_record``; the launch log then comes off Triton's launch path);
4. wall-clock vs CUDA-event time of a few calls (side streams, threads), before anything that
   reads gradients on the current stream;
5. fresh random inputs on every call (new tensors, then the same tensors refilled in place),
   each call compared with the reference on one batch element, which also goes to the parent
   (cached outputs); patch check; then the per-call times when inputs change before every call;
6. profiler: library attention anywhere; the submission's Triton share of the forward (its
   kernel names come from the parent); the events go to the parent;
7. the official timing (``--repeats`` times) and the random-dO timing, each between a
   "timing starts" and a "timing ends" message, with every per-call time;
8. patch check; ``done``.

Steps 1-6 stop at the first refusal (a ``refused`` message): a cheat that hides work could make
the timing run for hours. The verdicts that need the times are the parent's.

Messages, in order: ``hello``, ``gate``, ``launches``, ``fresh`` (one per call), ``timing_start``/``timing_end``
("fresh_inputs"), ``profile``, ``timing_start``/``timing_end`` ("official_1", ...,
"random_dO"), ``done``; or ``refused`` in place of any after ``hello``; or ``isolation_failed``
in place of ``hello``. The process's start (confinement, then what must be settled before Triton
is imported) is ``worker_boot.py``'s.
"""

from __future__ import annotations

import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from leaderboard.machine import environment

MODES = ("official", "quick", "cpu")
# What a confined worker may use (confine/limits.py), as the grader's executor: processes and
# threads of its leased uid (a fork bomb stops there) and the largest file it may write.
# The parent's wall-clock timeout bounds its time; CUDA's reservations rule out an address-space limit.
WORKER_LIMITS = {"nproc": 1024, "fsize_bytes": 2 << 30}
_START = time.monotonic()


def log(message: str) -> None:
    """Progress on stderr, with seconds since the worker started."""
    print(f"[leaderboard {time.monotonic() - _START:6.1f}s] {message}", file=sys.stderr, flush=True)


class Stopped(Exception):
    """Raised after a refusal has been recorded, to skip the remaining steps."""


class Evaluation:
    """The checks and timings of one submission; ``result`` collects everything reported."""

    def __init__(self, submission: Path | None, mode: str, repeats: int, seed: int, channel, triton_names: set[str], Fn=None):
        import torch

        from leaderboard import config
        from leaderboard.timer_guard import capture_clock, snapshot
        from harness.flash_tolerances import GATE_TOLERANCES

        self.torch = torch
        self.submission = submission
        self.mode = mode
        self.repeats = repeats
        self.cuda = mode != "cpu"
        self.problem = config.CPU_PROBLEM if mode == "cpu" else config.LEADERBOARD
        self.settings = {"official": config.OFFICIAL, "quick": config.QUICK, "cpu": config.CPU_TIMING}[mode]
        self.limits = config.LIMITS_CPU if mode == "cpu" else config.LIMITS
        self.tolerances = GATE_TOLERANCES[self.problem.dtype]
        self.channel = channel
        self.seed = seed
        self.triton_names = set(triton_names)
        self.refusals: list[dict] = []
        self.checks: dict[str, str] = {}
        self.info: dict = {}
        self.generator = torch.Generator(device=self.problem.device).manual_seed(seed)
        # Every step's tensors stay alive to the end, so no later input can reuse their memory:
        # a cache keyed on addresses then fails exactly where the cache check looks for it.
        self.keep: list = []
        # Before any submission code runs: our own references to the clocks, and what the
        # watched names point to.
        self.clock = capture_clock(self.cuda)
        self.before = snapshot()
        self.step = "setup"
        self.Fn = Fn  # given directly by the leaderboard's own tests; else imported in load()

    # -- helpers ---------------------------------------------------------------------------

    def refuse(self, *refusals) -> None:
        """Record every refusal given (None means passed) and stop if there was one."""
        found = [r for r in refusals if r is not None]
        self.refusals += [r.as_dict() for r in found]
        if found:
            raise Stopped()

    def passed(self, check: str, note: str = "passed") -> None:
        self.checks[check] = note

    @contextmanager
    def bracket(self, label: str):
        """Tell the parent a timing starts, run it, tell the parent it ended (with the times the
        body stores in the yielded list). Nothing is added inside the timed loop itself."""
        times: list[float] = []
        self.channel.send("timing_start", label=label)
        yield times
        self.channel.send("timing_end", label=label, times_ms=[float(t) for t in times])

    def randn(self, *shape: int, requires_grad: bool = False):
        p = self.problem
        x = self.torch.randn(shape, dtype=p.dtype, device=p.device, generator=self.generator)
        return x.requires_grad_(requires_grad)

    def untampered(self, when: str) -> None:
        from leaderboard.timer_guard import check_untampered

        self.refuse(check_untampered(self.before, when))

    def check_output(self, o, q, what: str) -> None:
        from leaderboard.detectors import Refusal, check_plain_tensor

        self.refuse(check_plain_tensor(o, what))
        if o.shape != q.shape or o.dtype != q.dtype or o.device != q.device:
            self.refuse(
                Refusal(
                    "error",
                    f"{what} has shape {tuple(o.shape)}, dtype {o.dtype} on {o.device}; expected "
                    f"Q's shape {tuple(q.shape)}, dtype {q.dtype} on {q.device}",
                )
            )

    def check_gradients(self, grads: dict, inputs: dict) -> None:
        from leaderboard.detectors import Refusal, check_plain_tensor

        for name, grad in grads.items():
            if grad is None:
                self.refuse(Refusal("error", f"{name} is None after backward; backward must return gradients for Q, K and V"))
            self.refuse(check_plain_tensor(grad, f"the gradient {name}"))
            wanted = inputs[name]
            if grad.shape != wanted.shape or grad.dtype != wanted.dtype:
                self.refuse(
                    Refusal("error", f"{name} has shape {tuple(grad.shape)} and dtype {grad.dtype}; expected {tuple(wanted.shape)}, {wanted.dtype}")
                )

    # -- the steps -------------------------------------------------------------------------

    def run(self) -> None:
        for step in (
            self.load,
            self.first_call,
            self.correctness_gate,
            self.launch_record,
            self.side_streams,
            self.fresh_inputs,
            self.fresh_input_timing,
            self.profile,
            self.timing,
        ):
            self.step = step.__name__
            step()

    def load(self) -> None:
        from leaderboard.detectors import Refusal
        from harness.submission import load_adapters

        if self.Fn is None:
            log(f"importing the submission in {self.submission}")
            adapters = load_adapters(self.submission)
            Fn = adapters.get_flashattention_autograd_function_triton()
        else:
            Fn = self.Fn
        if not (isinstance(Fn, type) and issubclass(Fn, self.torch.autograd.Function)):
            self.refuse(
                Refusal(
                    "error",
                    "adapters.get_flashattention_autograd_function_triton() must return a torch.autograd.Function "
                    f"subclass (the class itself); got {Fn!r}",
                )
            )
        self.Fn = Fn
        self.info["function"] = f"{Fn.__module__}.{Fn.__qualname__}"
        self.untampered("after importing the submission")

    def first_call(self) -> None:
        p = self.problem
        log(f"first call, eager, at {p.describe()} (compiles the submission's kernels)")
        q, k, v = (self.randn(*p.shape, requires_grad=True) for _ in range(3))
        do = self.randn(*p.shape)
        self.keep += [q, k, v, do]
        o = self.Fn.apply(q, k, v, p.is_causal)
        self.keep.append(o)
        self.check_output(o, q, "Fn.apply(Q, K, V, is_causal)'s output")
        o.backward(do)
        self.clock.synchronize()
        self.check_gradients({"dQ": q.grad, "dK": k.grad, "dV": v.grad}, {"dQ": q, "dK": k, "dV": v})
        self.passed("lazy_output")
        self.untampered("after the first call")

    def correctness_gate(self) -> None:
        from leaderboard.detectors import Refusal, check_unchanged
        from leaderboard.gate import compare_all
        from harness.flash_reference import attention_float64

        p = self.problem
        if self.cuda:  # CS336's official timing, literally
            log("flash = torch.compile(Fn.apply); correctness gate under a random dO")
            self.flash = self.torch.compile(self.Fn.apply)
        else:  # no C++ compiler needed: dynamo traces, nothing is code-generated
            log("flash = torch.compile(Fn.apply, backend='eager'); correctness gate under a random dO")
            self.flash = self.torch.compile(self.Fn.apply, backend="eager")
        from leaderboard.gate import check_inputs

        q, k, v, do = (t.requires_grad_(i < 3) for i, t in enumerate(check_inputs(p, self.seed, "gate", 4).unbind(0)))
        inputs = {"Q": q, "K": k, "V": v, "dO": do}
        self.keep += [q, k, v, do]
        copies = {name: t.detach().clone() for name, t in inputs.items()}
        o = self.flash(q, k, v, p.is_causal)
        self.keep.append(o)
        self.check_output(o, q, "torch.compile(Fn.apply)(Q, K, V, is_causal)'s output")
        o.backward(do)
        self.clock.synchronize()
        self.check_gradients({"dQ": q.grad, "dK": k.grad, "dV": v.grad}, {"dQ": q, "dK": k, "dV": v})
        self.refuse(check_unchanged(copies, {name: t.detach() for name, t in inputs.items()}))
        self.passed("mutated_inputs")
        log("computing the float64 reference (in chunks of queries)")
        want = attention_float64(q, k, v, p.is_causal, do)
        got = {"O": o, "dQ": q.grad, "dK": k.grad, "dV": v.grad}
        comparisons = compare_all(got, want, self.tolerances)
        log("gate: " + ", ".join(f"{c.name} rel L2 {c.rel_l2:.2e}" for c in comparisons))
        problems = [c.problem for c in comparisons if c.problem]
        if problems:
            self.refuse(Refusal("incorrect", "; ".join(problems)))
        self.passed("incorrect")
        self.channel.send("gate", {name: t.detach() for name, t in got.items()})

    def launch_record(self) -> None:
        """Write down every launch of the submission's kernels in one eager forward and backward on
        the gate's inputs (``executor/launches.py``), and send it to the parent, which replays
        the launches on its own inputs in a process that runs only the kernels (its verdict and the
        kernels' time: ``parent.parent_replay``). The record names storages: the gate's Q, K, V and
        dO by name, a constant by its value, anything else as unknown (the parent starts it as NaN).
        No tensor's values travel. On a GPU the launch log then comes off Triton's launch path, so
        that the timed calls run without it."""
        from leaderboard.gate import check_inputs

        p = self.problem
        if LAUNCH_LOG is None or self.submission is None:
            self.channel.send("launches", record={"launches": [], "storages": []}, forward=0)
            return
        log("one eager forward and backward, its launches written down for the parent's replay")
        # each in a storage of its own, so that the record names each input's storage by the input
        q, k, v, do = (t.clone().requires_grad_(i < 3) for i, t in enumerate(check_inputs(p, self.seed, "gate", 4).unbind(0)))
        self.keep += [q, k, v, do]
        LAUNCH_LOG.take()
        record = LAUNCH_LOG.recording()
        try:
            o = self.Fn.apply(q, k, v, p.is_causal)
            forward = len(record.launches)
            o.backward(do)
            self.clock.synchronize()
        finally:
            LAUNCH_LOG.stop_recording()
            LAUNCH_LOG.take()
            if self.cuda:
                LAUNCH_LOG.uninstall()
        self.keep.append(o)
        named, kept_forward = record.named({"Q": q, "K": k, "V": v, "dO": do}, self.submission, forward)
        self.channel.send("launches", record=named, forward=kept_forward)

    def fresh_inputs(self) -> None:
        from leaderboard.detectors import Refusal
        from leaderboard.gate import check_inputs, checked_batch_element, compare_all
        from harness.flash_reference import attention_float64

        p = self.problem
        torch = self.torch
        log(f"{self.limits.fresh_input_repeats} calls with fresh random inputs, each checked against the reference")
        base = None
        for call in range(self.limits.fresh_input_repeats):
            label = f"fresh_{call + 1}"
            if call % 2 == 0:
                how = "new tensors"
                base = check_inputs(p, self.seed, label, 3).requires_grad_()
                self.keep.append(base)
            else:
                how = "the same tensors, refilled in place"
                with torch.no_grad():
                    base.copy_(check_inputs(p, self.seed, label, 3))
                base.grad = None
            q, k, v = base
            o = self.flash(q, k, v, p.is_causal)
            self.keep.append(o)
            self.check_output(o, q, "the output")
            o.sum().backward()
            self.clock.synchronize()
            b = checked_batch_element(p, self.seed, label)
            one = slice(b, b + 1)
            want = attention_float64(q[one], k[one], v[one], p.is_causal, torch.ones_like(o[one]))
            got = {"O": o[one], "dQ": base.grad[0, one], "dK": base.grad[1, one], "dV": base.grad[2, one]}
            problems = [c.problem for c in compare_all(got, want, self.tolerances) if c.problem]
            if problems:
                self.refuse(
                    Refusal(
                        "cached_outputs",
                        f"call {call + 1} with fresh random inputs ({how}) does not match the reference on "
                        f"batch element {b}: {'; '.join(problems)}. The same code was correct on the gate's "
                        "inputs, so outputs are being reused; recompute them on every call.",
                    )
                )
            self.channel.send("fresh", {name: t.detach() for name, t in got.items()}, label=label, batch=b)
        self.untampered("after the correctness checks")

    def side_streams(self) -> None:
        from leaderboard.detectors import check_wall_vs_event

        p = self.problem
        if not self.cuda:
            self.passed("side_stream", "skipped: needs CUDA events")
            return
        calls = self.limits.probe_calls_gpu
        q, k, v = base = self.randn(3, *p.shape, requires_grad=True)
        self.keep.append(base)

        def step():
            self.flash(q, k, v, p.is_causal).sum().backward()

        step()
        step()
        self.clock.synchronize()
        log(f"wall clock vs CUDA events over {calls} calls")
        start, end = self.clock.Event(enable_timing=True), self.clock.Event(enable_timing=True)
        t0 = self.clock.perf_counter()
        start.record()
        for _ in range(calls):
            step()
        end.record()
        self.clock.synchronize()  # device-wide: waits for every stream
        wall_ms = 1e3 * (self.clock.perf_counter() - t0)
        event_ms = start.elapsed_time(end)
        self.info["probe"] = {"calls": calls, "wall_ms": wall_ms, "event_ms": event_ms}
        log(f"wall {wall_ms:.1f} ms, CUDA events {event_ms:.1f} ms")
        self.refuse(check_wall_vs_event(wall_ms, event_ms, calls, self.limits))
        self.passed("side_stream")

    def fresh_input_timing(self) -> None:
        p = self.problem
        torch = self.torch
        calls = self.limits.probe_calls_gpu if self.cuda else self.limits.probe_calls_cpu
        base = self.randn(3, *p.shape, requires_grad=True)
        self.keep.append(base)

        def step():
            q, k, v = base  # fresh views: refilling base in place invalidates older ones
            self.flash(q, k, v, p.is_causal).sum().backward()

        step()
        self.clock.synchronize()
        log(f"{calls} calls with inputs refilled before each (per-call time)")
        with self.bracket("fresh_inputs") as times:
            events = []
            for _ in range(calls):
                with torch.no_grad():
                    base.copy_(self.randn(3, *p.shape))
                base.grad = None
                if self.cuda:  # like do_bench: per-call events, no synchronisation between calls
                    s, e = self.clock.Event(enable_timing=True), self.clock.Event(enable_timing=True)
                    s.record()
                    step()
                    e.record()
                    events.append((s, e))
                else:
                    t0 = self.clock.perf_counter()
                    step()
                    times.append(1e3 * (self.clock.perf_counter() - t0))
            self.clock.synchronize()
            times += [s.elapsed_time(e) for s, e in events]
        log(f"fresh inputs: {self.clock.median(times):.3f} ms per call")

    def profile(self) -> None:
        from leaderboard.kernels import (
            summarize_events,
            check_library_attention,
            check_triton_launched,
            check_triton_share,
            is_triton_kernel,
            profile_call,
            top_kernels,
            triton_share,
        )

        p = self.problem
        log("profiling one forward and one forward + backward")
        base = self.randn(3, *p.shape, requires_grad=True)
        q, k, v = base
        if LAUNCH_LOG is not None:
            LAUNCH_LOG.take()
        forward = profile_call(lambda: self.flash(q, k, v, p.is_causal), self.clock.synchronize, self.cuda)
        launched = [launch.name for launch in LAUNCH_LOG.take()] if LAUNCH_LOG is not None else []
        both = profile_call(lambda: self.flash(q, k, v, p.is_causal).sum().backward(), self.clock.synchronize, self.cuda)
        names = self.triton_names
        self.channel.send("profile", forward=summarize_events(forward), both=summarize_events(both), launched=sorted(set(launched)))
        for name, us in top_kernels(both, 6):
            marker = "triton" if is_triton_kernel(name, names) else "      "
            log(f"  {marker} {us:10.0f} us  {name[:110]}")
        triton_us, total_us = triton_share(forward, names)
        share_known = self.cuda and total_us > 0
        if share_known:
            log(f"the submission's Triton kernels: {triton_us / total_us:.1%} of the forward's GPU time")
        elif self.cuda:
            log("warning: the profiler recorded no GPU kernels (is CUPTI available?); Triton share not checked")
        else:
            log(f"Triton kernels the interpreter launched in the forward: {', '.join(sorted(set(launched))) or 'none'}")
        self.refuse(
            check_library_attention(forward + both, names),
            check_triton_share(forward, names, self.limits.min_triton_share_forward) if share_known else None,
            None if self.cuda else check_triton_launched(launched, names),
        )
        self.passed("library_attention")
        if share_known or not self.cuda:
            self.passed("not_triton")
        else:
            self.passed("not_triton", "skipped: the profiler recorded no GPU kernels")

    def timing(self) -> None:
        from leaderboard.timing import time_official, time_random_dO

        p, s = self.problem, self.settings
        log(f"official timing ({s.name}: warmup {s.warmup_ms} ms, rep {s.rep_ms} ms) x {self.repeats}")
        timings = time_official(self.flash, p, s, self.clock, repeats=self.repeats, bracket=self.bracket)
        log("official: " + ", ".join(f"{t.median_ms:.3f} ms" for t in timings))
        log("timing with a random dO")
        random_dO = time_random_dO(self.flash, p, s, self.clock, bracket=self.bracket)
        log(f"random dO: {random_dO.median_ms:.3f} ms")
        self.untampered("after timing")


# The submission's @triton.jit launches (executor/launches.py LaunchLog; set by worker_boot.py): for the
# launch record on a GPU, and for the launch record and the profile under the interpreter (--cpu).
LAUNCH_LOG = None


def evaluate(submission: Path | None, mode: str, channel, repeats: int = 1, seed: int = 0, triton_names=(), Fn=None) -> None:
    """Check and time one submission in this process, reporting on ``channel``; never raises
    for a failing submission (its errors become a ``refused`` message). ``Fn`` skips the import
    (for tests); ``triton_names`` are the submission's kernel names, found by the parent."""
    from leaderboard.detectors import Refusal

    evaluation = None
    try:
        evaluation = Evaluation(submission, mode, repeats, seed, channel, triton_names, Fn=Fn)
        evaluation.run()
    except Stopped:
        pass
    except BaseException as error:  # SystemExit too: the submission must not end the worker silently
        if isinstance(error, KeyboardInterrupt):
            raise
        step = evaluation.step if evaluation else "setup"
        if isinstance(error, Refusal):
            refusal = error.as_dict()
        else:
            refusal = {"code": "error", "message": f"{type(error).__name__} during {step}: {str(error)[:2000]}"}
            trace = traceback.format_exc()[-6000:]
            log(f"error during {step}:\n{trace}")
            if evaluation is not None:
                evaluation.info["traceback"] = trace
        if evaluation is None:
            channel.send("refused", refusals=[refusal], checks={}, info={})
            return
        evaluation.refusals.append(refusal)
    if evaluation.refusals:
        channel.send("refused", refusals=evaluation.refusals, checks=evaluation.checks, info=evaluation.info)
    else:
        channel.send("done", checks=evaluation.checks, info=evaluation.info, environment=environment())

