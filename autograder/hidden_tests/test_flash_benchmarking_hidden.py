"""Hidden tests of §2.6 flash_benchmarking: non-causal sweeps, other batch sizes, three
implementations, out of memory while drawing inputs, and the GPU grid with float32."""

from __future__ import annotations

import pytest
import torch

from tests.checks.fake_flash import NAMES, PHASES, fake_sweep


def test_is_causal_false_and_batch_size_are_passed(adapters):
    fake = fake_sweep(
        adapters, seq_lens=[8], head_dims=[16], dtypes=[torch.float16], device="cpu", batch_size=3, is_causal=False,
    )
    rows = fake.rows
    assert rows[0]["is_causal"] is False and rows[0]["batch_size"] == 3 and rows[0]["dtype"] == "float16", rows
    assert {(shape, dtype, causal) for _, shape, dtype, causal, _ in fake.log} == {((3, 8, 16), torch.float16, False)}


def test_any_number_of_implementations(adapters):
    fake = fake_sweep(
        adapters, names=(*NAMES, "third"), seq_lens=[8], head_dims=[16], dtypes=[torch.float32], device="cpu",
    )
    (row,) = fake.rows
    assert all(row[f"{name}_{phase}_ms"] in fake.ran for name in ("triton", "pytorch", "third") for phase in PHASES), row
    assert len(fake.ran) == 9


def test_oom_while_drawing_inputs_marks_every_implementation(adapters):
    # torch.randn raises OutOfMemoryError, next to the submission, for any shape holding 64.
    rows = fake_sweep(
        adapters, oom_randn_size=64, seq_lens=[8, 64, 8], head_dims=[16], dtypes=[torch.float32], device="cpu",
    ).rows
    assert [sorted(row["oom"]) for row in rows] == [[], ["pytorch", "triton"], []], [row["oom"] for row in rows]
    assert all(rows[1][f"{name}_{phase}_ms"] is None for name in NAMES for phase in PHASES), rows[1]


@pytest.mark.gpu
@pytest.mark.timing  # the submission's autotuners tune, as they would when benchmarked
def test_gpu_grid_with_float32_and_bfloat16(adapters):
    rows = adapters.run_flash_benchmark_sweep(
        seq_lens=[256, 2048], head_dims=[128], dtypes=[torch.float32, torch.bfloat16], device="cuda"
    )  # one head dim: each (d, dtype) compiles new kernels, and two head dims took 91 s on an H200
    assert len(rows) == 4 and all(row["oom"] == [] for row in rows)
    for row in rows:
        for name in ("triton", "pytorch"):
            values = [row[f"{name}_{phase}_ms"] for phase in PHASES]
            assert all(isinstance(v, float) and v > 0 for v in values), row
