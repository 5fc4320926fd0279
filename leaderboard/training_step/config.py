"""What the training-step board runs: the model and batch, the timing, the tolerances, the limits.

Read by the harness, the trusted run and the verdicts of leaderboard/training_step. The
official config is CS336 2026's (handout §9); the tiny one is the ``--cpu`` run's, which tests
the whole pipeline with gloo on two processes in a few seconds.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One training-step problem: the model, the global batch, the dtype, and how it is timed and judged."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    context_length: int
    batch_size: int            # global: each of ``world_size`` ranks takes batch_size / world_size rows
    compute_dtype: str         # the dtype the step must compute in ("bfloat16" officially)
    world_size: int = 2
    seed: int = 0
    gate_steps: int = 3        # steps checked against the trusted run before timing
    warmup_ms: float = 0.0     # GPU timing (do_bench's meaning): milliseconds of warm-up, then of measurement
    rep_ms: float = 0.0
    warmup_calls: int = 1      # CPU fallback: calls not timed, then calls timed (each one on its own)
    rep_calls: int = 3
    time_limit_s: float = 600.0  # the whole run: start, gate, timing; a run past it is refused
    loss_rtol: float = 1e-5    # every step's loss (mean of the ranks') against the trusted run's
    param_atol: float = 1e-5   # every parameter after gate_steps steps: |got - truth| <= atol + rtol |truth|
    param_rtol: float = 1e-4
    update_rtol: float | None = None  # 16-bit configs instead: each tensor's update (after - initial) within
    #                                   update_rtol of the trusted update, in norm: ||got - truth|| / ||truth||
    ranks_atol: float = 1e-6   # the ranks' parameters after the gate: at most this far apart (one model)
    trusted_fits: bool = True  # the trusted single-process run fits one device (False: not built yet)
    optimizer: tuple = (("lr", 1e-3), ("betas", (0.9, 0.95)), ("eps", 1e-8), ("weight_decay", 0.1))

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.compute_dtype)

    def optimizer_settings(self) -> dict:
        """AdamW's settings, as handed to the submission and used by the trusted run."""
        return dict(self.optimizer)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


OFFICIAL = StepConfig(
    name="official", d_model=4096, d_ff=11008, num_layers=34, num_heads=32, vocab_size=151936,
    context_length=32768, batch_size=2, compute_dtype="bfloat16", gate_steps=2,
    warmup_ms=10_000.0, rep_ms=30_000.0, time_limit_s=600.0,
    # bf16: provisional, to be set from runs on two H200s (not measured yet).
    loss_rtol=2e-2, update_rtol=0.3, trusted_fits=False,
)
"""CS336 2026's problem: about 8B parameters, batch 2 of 32768 tokens, bf16, two GPUs, 10 minutes.

Its trusted run cannot be one process: 8.1B parameters' weights, gradients and AdamW moments
take about 130 GB before any activation. It needs a trusted FSDP run, not built yet.
"""

TRIAL = dataclasses.replace(OFFICIAL, name="trial", warmup_ms=1_000.0, rep_ms=3_000.0)
"""The official problem with short timings, for iterating."""

TINY = StepConfig(
    name="tiny", d_model=32, d_ff=64, num_layers=2, num_heads=4, vocab_size=97, context_length=16,
    batch_size=4, compute_dtype="float32", gate_steps=3, warmup_calls=1, rep_calls=3, time_limit_s=120.0,
)
"""The ``--cpu`` run's problem (gloo, two processes): the pipeline, not the speed."""

SMALL = StepConfig(
    name="small", d_model=512, d_ff=1376, num_layers=4, num_heads=8, vocab_size=8192, context_length=1024,
    batch_size=2, compute_dtype="bfloat16", gate_steps=2, warmup_ms=200.0, rep_ms=1_000.0, time_limit_s=300.0,
    # bf16: provisional, like the official config's.
    loss_rtol=2e-2, update_rtol=0.3,
)
"""The official problem's shape in small (bf16, one row of 1024 tokens a rank): the two-GPU
pipeline with a trusted single-process run that fits one GPU."""

TINY_BF16 = dataclasses.replace(TINY, name="tiny_bf16", compute_dtype="bfloat16", gate_steps=2, loss_rtol=2e-2,
                                update_rtol=0.3)
"""The 16-bit gate (the updates compared in norm) on the CPU."""

CONFIGS = {config.name: config for config in (OFFICIAL, TRIAL, SMALL, TINY, TINY_BF16)}
