"""The timed problem, its FLOP count, the timing settings and every threshold the checks use.

Staff read this file to know exactly what the leaderboard measures and when it refuses.
Nothing else in the package hard-codes a shape or a limit. The correctness gate's tolerances are
stated beside the tests' in one model (harness/flash_tolerances.py ``GATE_TOLERANCES``), and its
reference is the tests' float64 truth (harness/flash_reference.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Problem:
    """One attention problem: Q, K, V of shape (batch, n, d), all of ``dtype``, on ``device``.

    ``batch`` folds the heads into the batch dimension: the leaderboard's batch 1 with 16 heads
    is ``batch=16``.
    """

    batch: int
    n: int
    d: int
    dtype: torch.dtype
    is_causal: bool
    device: str

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.batch, self.n, self.d)

    def describe(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        causal = "causal" if self.is_causal else "non-causal"
        return f"{self.batch} x {self.n} x {self.d}, {dtype}, {causal}, {self.device}"


# The official problem: batch 1 x 16 heads (folded), sequence 16384, head dim 64, causal, bf16.
LEADERBOARD = Problem(batch=16, n=16384, d=64, dtype=torch.bfloat16, is_causal=True, device="cuda")

# --cpu: small enough for Triton's interpreter on a CPU, float32 because the interpreter's
# bfloat16 tl.dot is wrong in triton 3.6. It tests the pipeline and the CPU-side checks only.
CPU_PROBLEM = Problem(batch=2, n=64, d=16, dtype=torch.float32, is_causal=True, device="cpu")


def attention_flops(batch: int, n: int, d: int, is_causal: bool) -> float:
    """FLOPs of one attention forward + backward, the convention every time here is judged by.

    Forward: two (n x n x d) matrix products per batch element (Q K^T and P V), 2 FLOPs per
    multiply-add, so ``4 * batch * n^2 * d``; causal attention needs only the lower half,
    ``2 * batch * n^2 * d``. Backward: five products instead of two (S again, dP, dV, dQ, dK),
    counted as 2.5 times the forward. Softmax and masking are not counted.

    At the leaderboard shape (16, 16384, 64, causal): forward 0.550e12, backward 1.374e12,
    total 1.924e12 FLOP.
    """
    forward = 4.0 * batch * n * n * d
    if is_causal:
        forward /= 2.0
    return forward + 2.5 * forward


def matmul_flops(size: int) -> float:
    """FLOPs of one (size x size) @ (size x size) matrix product: ``2 * size^3``."""
    return 2.0 * size**3


@dataclass(frozen=True)
class TimingSettings:
    """How long each timing runs.

    With CUDA, times come from ``triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms)``:
    ``rep_ms`` of timed calls after ``warmup_ms`` of untimed ones, each call timed by its own
    CUDA events after an L2 flush. Without CUDA (``--cpu``) a plain host timer times
    ``plain_calls`` calls after ``plain_warmup_calls`` untimed ones.
    """

    name: str
    warmup_ms: int
    rep_ms: int
    matmul_warmup_ms: int
    matmul_rep_ms: int
    plain_warmup_calls: int = 1
    plain_calls: int = 5


# The official timing: do_bench(..., rep=10000, warmup=1000).
OFFICIAL = TimingSettings(name="official", warmup_ms=1000, rep_ms=10000, matmul_warmup_ms=500, matmul_rep_ms=2000)
# --quick: for iterating, and for cheat fixtures whose verdict does not hang on a close timing.
QUICK = TimingSettings(name="quick", warmup_ms=200, rep_ms=1000, matmul_warmup_ms=100, matmul_rep_ms=500)
CPU_TIMING = TimingSettings(name="cpu", warmup_ms=0, rep_ms=0, matmul_warmup_ms=0, matmul_rep_ms=0, plain_warmup_calls=1, plain_calls=3)

# The matrix product whose rate sets the physical floor: bf16 on the GPU, float32 on a CPU.
MATMUL_SIZE_GPU = 8192
MATMUL_SIZE_CPU = 256


@dataclass(frozen=True)
class Limits:
    """When the cheat checks refuse. Each bound is explained where it is used (``detectors``)."""

    # Work on a side stream or thread: host wall-clock time of a few calls, device-synchronized,
    # may exceed the CUDA-event time of the same calls by at most this factor plus slack_ms.
    wall_over_event: float = 1.5
    wall_slack_ms: float = 5.0
    probe_calls_gpu: int = 10
    probe_calls_cpu: int = 2
    # Outputs cached across calls: this many calls with fresh random inputs, each compared with
    # the reference on one randomly chosen batch element.
    fresh_input_repeats: int = 3
    # ... and the official time (fixed inputs) may be at most this much faster than the median
    # time of calls whose inputs were refilled with new random values before each call.
    fixed_faster_than_fresh: float = 0.25
    # Specialising on dO = ones: the official time (dO = ones) may be at most this much faster
    # than the time with a random dO.
    ones_faster_than_random: float = 0.10
    # Library attention: the submission's Triton kernels must take at least this share of the
    # forward's GPU time.
    min_triton_share_forward: float = 0.5
    # The official time may be at most this much below the time of the submission's own kernels,
    # replayed back to back by the parent (``replay.py``; the replay leaves out PyTorch's work
    # between the kernels, so an honest official time is above it), timed over replay_rep_ms.
    faster_than_kernels: float = 0.05
    replay_rep_ms: int = 2000


LIMITS = Limits()
# --cpu times a Python interpreter on a shared CPU, where two timings of the same code differ
# by whatever else the machine runs: at a load average of 7 on 2 cores, the honest fixture's
# fresh-input calls took 88 ms against 35 ms for its official loop (2026-12-02), and a bound of
# 0.5 refused it. Only the coarse, timing-based checks run there, refusing only a loop 10 times
# faster: a cache that skips the work (cheat_smart_cache) is about 100 times faster there.
LIMITS_CPU = Limits(fixed_faster_than_fresh=0.9, ones_faster_than_random=0.9)

# Worker time limits (seconds), enforced by the parent process. Each run compiles in a fresh
# cache (a shared one could be poisoned by an earlier submission).
WORKER_TIMEOUT_S = {"official": 600, "quick": 420, "cpu": 300}



# The parent's check of a reported timing (see verdict.check_timing): the sum of the reported
# per-call times may exceed the parent's own bracket around the timing by at most this much,
# the delay between the worker writing a message and the parent stamping it, plus clock drift.
BRACKET_SLACK_MS = 25.0
BRACKET_SLACK_REL = 0.002
