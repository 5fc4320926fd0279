"""Hypothesis settings for the shape-fuzzing tests: one profile for CPUs, one for GPUs.

Imported by every test module that uses Hypothesis (importing it loads the profile). The
profile is picked by ``$HYPOTHESIS_PROFILE`` if set, else ``gpu`` when CUDA is available and
``cpu`` otherwise:

- ``cpu``: few examples, small shapes, float32 and float16 only. Triton kernels run under the
  interpreter there, which takes seconds per launch at moderate sizes, and its bfloat16
  ``tl.dot`` is wrong in triton 3.6.
- ``gpu``: larger shapes, bfloat16 too; few examples, since each new shape compiles kernels.
- ``thorough``: many examples on either machine, for hunting a bug (slow on a CPU).

A stub's NotImplementedError ends a test at its first example, unshrunk (harness/stub_failures.py).

``FUZZ`` holds what the chosen profile allows (sizes and dtypes), so the strategies in the test
modules read their bounds from one place. Rerun one failing example exactly: Hypothesis prints
``@reproduce_failure(...)``, and every failure also prints the case as a one-line repro.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, settings

from harness import gpus


@dataclass(frozen=True)
class FuzzBounds:
    """What a profile lets the shape strategies draw."""

    max_batch: int
    max_tokens: int  # largest n_queries and n_keys
    dtypes: tuple[torch.dtype, ...]  # for the Triton Function; the PyTorch one adds bfloat16 on a CPU too
    device: str


_COMMON = dict(
    deadline=None,  # one example can take seconds under the Triton interpreter
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
    # Stop at the first bug and shrink only that one: each rerun may launch interpreted kernels.
    report_multiple_bugs=False,
)
settings.register_profile("cpu", max_examples=8, **_COMMON)
# gpu: nearly every drawn shape is a new Triton specialisation (head dim, dtype, causal flag, and
# whether sizes, strides and offsets are multiples of 16), so each example compiles new kernels.
# Measured on an H200 grading the reference: the backward test took 102 s at 10 examples (about
# 10 s per example: 4 kernels per new shape), close to the grader's 120 s per-test limit that a
# slower-compiling student kernel would then pass. At 4 examples it takes about 40 s, leaving a
# student's kernels 3x headroom. The hidden tests keep the breadth (fixed odd shapes); this
# fuzzing is for students' own runs (HYPOTHESIS_PROFILE=thorough for more).
settings.register_profile("gpu", max_examples=4, **_COMMON)
settings.register_profile("thorough", max_examples=400, **_COMMON)

_BOUNDS = {
    "cpu": FuzzBounds(max_batch=2, max_tokens=80, dtypes=(torch.float32, torch.float16), device="cpu"),
    "gpu": FuzzBounds(
        max_batch=4, max_tokens=1100, dtypes=(torch.float32, torch.float16, torch.bfloat16), device="cuda"
    ),
}

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("gpu" if gpus.count() else "cpu")
settings.load_profile(PROFILE)
FUZZ = _BOUNDS["gpu" if gpus.count() else "cpu"]
