"""Hidden tests of §2.1 pytorch_attention: out of memory in the backward pass, one compile per
sweep, the default attention, and real memory numbers on a GPU."""

from __future__ import annotations

import pytest
import torch

from tests.checks.fake_attention import sweep_with_fake


def test_one_torch_compile_for_a_whole_grid(adapters):
    fake = sweep_with_fake(
        adapters, {}, batch_size=1, head_dims=[2, 4, 6], seq_lens=[3, 5], device="cpu", warmup_steps=0,
        measure_steps=1, compiled=True,
    )
    assert len(fake.rows) == 6 and fake.compile_calls == 1, (
        f"compile the attention once for the whole sweep; torch.compile ran {fake.compile_calls} times for 6 rows"
    )


def test_uncompiled_sweep_does_not_compile(adapters):
    fake = sweep_with_fake(
        adapters, {}, batch_size=1, head_dims=[4], seq_lens=[4], device="cpu", warmup_steps=0, measure_steps=1,
    )
    assert not fake.compile_calls and fake.rows[0]["compiled"] is False


def test_oom_in_backward_keeps_the_forward_time(adapters):
    rows = sweep_with_fake(
        adapters, {"oom_backward_from": 16}, batch_size=1, head_dims=[4], seq_lens=[8, 16, 8], device="cpu",
        warmup_steps=1, measure_steps=2,
    ).rows
    assert [row["oom"] for row in rows] == [False, True, False], rows
    assert rows[1]["backward_ms"] is None, rows[1]
    assert rows[2]["backward_ms"] is not None, "the sweep must go on after an out-of-memory error"


def test_warmup_zero_and_many_steps(adapters):
    fake = sweep_with_fake(
        adapters, {}, batch_size=2, head_dims=[4], seq_lens=[8], device="cpu", warmup_steps=0, measure_steps=7,
    )
    assert len(fake.inputs) >= 7, f"7 measured forward passes must call the attention 7 times at least; got {len(fake.inputs)}"


def test_default_attention_runs_on_other_head_dims(adapters):
    rows = adapters.run_attention_sweep(
        batch_size=1, head_dims=[16, 32], seq_lens=[64], device="cpu", warmup_steps=0, measure_steps=1
    )
    assert [row["head_dim"] for row in rows] == [16, 32] and all(not row["oom"] for row in rows), rows


@pytest.mark.gpu
@pytest.mark.alone_on_gpu  # compares two forward times: no other test of the grade shares the GPU meanwhile
def test_gpu_memory_grows_with_the_square_of_seq_len(adapters):
    rows = adapters.run_attention_sweep(
        batch_size=8, head_dims=[64], seq_lens=[1024, 4096], device="cuda", warmup_steps=2, measure_steps=5
    )
    small, big = (row["memory_before_backward_bytes"] for row in rows)
    extra = 8 * (4096**2 - 1024**2) * 4  # more saved attention weights, float32
    assert big - small >= extra, f"memory before backward must grow by at least {extra} bytes; got {small} -> {big}"
    assert rows[1]["forward_ms"] > rows[0]["forward_ms"], rows


@pytest.mark.gpu
def test_gpu_compiled_sweep_runs(adapters):
    rows = adapters.run_attention_sweep(
        batch_size=8, head_dims=[32], seq_lens=[512], device="cuda", warmup_steps=2, measure_steps=5, compiled=True
    )
    assert rows[0]["compiled"] is True and rows[0]["forward_ms"] > 0 and rows[0]["backward_ms"] > 0, rows
