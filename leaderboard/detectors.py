"""The cheat checks that need neither a profiler nor the captured timers, and the Refusal they give.

Staff read this file to know when a submission is refused and why. Each ``check_*`` function
returns ``None`` when the submission passes and a ``Refusal`` naming the cheat when it does
not; the worker stops at the first refusal before timing and collects every refusal after it.
Patched timers are checked in ``timer_guard``, library attention in ``kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leaderboard.config import Limits

# Every reason a submission can be refused for: code -> what it means.
REASONS = {
    "error": "the submission raised an exception, crashed or returned the wrong shape or dtype",
    "timeout": "the run did not finish within its time limit",
    "incorrect": "outputs or gradients differ from the float64 reference (correctness gate)",
    "lazy_output": "an output or gradient is a tensor subclass or another lazy object, not a plain torch.Tensor",
    "mutated_inputs": "Q, K, V or dO were changed in place",
    "cached_outputs": "outputs are reused across calls instead of recomputed",
    "side_stream": "work runs where CUDA events on the current stream cannot see it (side stream or thread)",
    "patched_timers": "timers, synchronisation or functions the timing relies on were replaced",
    "library_attention": "library attention (SDPA, cuDNN, flash-attn) runs instead of the submission's Triton",
    "not_triton": "the submission's own @triton.jit kernels take less than half of the forward's GPU time (or, without a GPU, none ran)",
    "ones_dO": "the official time (dO = ones) is much faster than the time with a random dO",
    "below_floor": "faster than the physical floor: the FLOPs at the bf16 matmul rate the parent measured in the same run",
    "forged_timing": "the reported per-call times add up to more than the parent's own clock saw between the timing's start and end",
    "protocol": "the worker's messages to the parent were malformed, out of order or incomplete",
    "not_replayed": "the forward's O is not the work of the submission's own Triton kernels when the parent replays "
                    "their recorded launches on its own inputs, in a process that runs nothing else of the submission",
    "faster_than_kernels": "the official time is below the time the submission's own kernels take, replayed by the parent",
}


@dataclass
class Refusal(Exception):
    """Why a submission is refused: ``code`` is a key of ``REASONS``, ``message`` the details."""

    code: str
    message: str

    def __post_init__(self):
        if self.code not in REASONS:
            raise ValueError(f"unknown refusal code {self.code!r}; add it to REASONS in leaderboard/detectors.py")
        super().__init__(f"{self.code}: {self.message}")

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def check_plain_tensor(value, what: str) -> Refusal | None:
    """Refuse anything but a plain ``torch.Tensor``: a subclass can defer or fake work in
    ``__torch_function__``, and a lazy object can move work out of the timed region."""
    if type(value) is torch.Tensor:
        return None
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    return Refusal(
        "lazy_output",
        f"{what} is a {kind}, not a plain torch.Tensor; return the computed tensor itself "
        "(no subclass, wrapper or deferred computation).",
    )


def check_unchanged(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> Refusal | None:
    """Refuse when any input differs from the copy taken before the call (compared exactly)."""
    changed = [name for name, copy in before.items() if not torch.equal(copy, after[name])]
    if not changed:
        return None
    return Refusal(
        "mutated_inputs",
        f"{', '.join(changed)} changed during forward + backward; inputs must be left exactly as "
        "given (write scaled or transposed copies to new tensors instead).",
    )


def check_wall_vs_event(wall_ms: float, event_ms: float, calls: int, limits: Limits) -> Refusal | None:
    """Refuse when host wall-clock time far exceeds CUDA-event time for the same calls.

    The wall-clock region ends with a device-wide synchronize, so it includes work on every
    stream; events recorded on the current stream only see work ordered on that stream. An
    honest submission, fast or launch-bound, gives wall ~ event (the events also span any idle
    gaps between launches). Work on a side stream, or launched from another thread, that the
    current stream never waits for shows up only in wall-clock time.
    """
    if wall_ms <= limits.wall_over_event * event_ms + limits.wall_slack_ms:
        return None
    return Refusal(
        "side_stream",
        f"{calls} calls took {wall_ms:.1f} ms of wall-clock time (device synchronized) but only "
        f"{event_ms:.1f} ms between CUDA events on the current stream; work on another stream "
        "or thread must be joined to the current stream before returning "
        "(torch.cuda.current_stream().wait_stream(side)).",
    )


def check_fixed_vs_fresh(fixed_ms: float, fresh_ms: float, limit: float) -> Refusal | None:
    """Refuse when calls on fixed inputs (the official loop) are much faster than calls whose
    inputs were refilled with new random values before each call: results are being reused."""
    if fixed_ms >= (1.0 - limit) * fresh_ms:
        return None
    return Refusal(
        "cached_outputs",
        f"the official loop (same inputs every call) took {fixed_ms:.3f} ms per call, but "
        f"{fresh_ms:.3f} ms when the inputs changed before each call (more than {limit:.0%} "
        "slower); every call must recompute its outputs.",
    )


def check_ones_vs_random(ones_ms: float, random_ms: float, limit: float) -> Refusal | None:
    """Refuse when the official loss (o.sum(), so dO is all ones) is much faster than a random dO."""
    if ones_ms >= (1.0 - limit) * random_ms:
        return None
    return Refusal(
        "ones_dO",
        f"with dO = ones (the official o.sum().backward()) a call took {ones_ms:.3f} ms, with a "
        f"random dO {random_ms:.3f} ms (more than {limit:.0%} slower); the backward must not "
        "special-case dO.",
    )


def check_floor(time_ms: float, floor_ms: float, flops: float, matmul_tflops: float, matmul: str = "bf16") -> Refusal | None:
    """Refuse a time below the physical floor: all the FLOPs at the matmul rate measured in the
    same run (``matmul`` names that product's dtype)."""
    if time_ms >= floor_ms:
        return None
    return Refusal(
        "below_floor",
        f"{time_ms:.3f} ms is below the physical floor of {floor_ms:.3f} ms ({flops / 1e12:.3f} "
        f"TFLOP at the {matmul_tflops:.3g} TFLOP/s of a {matmul} matmul measured in this run); "
        "the measured time cannot include all the work.",
    )
