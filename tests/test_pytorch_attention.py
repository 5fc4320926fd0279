"""Visible tests of §2.1 pytorch_attention: the attention sweep.

On a CPU the sweep runs fake attentions: one that sleeps a known time in forward and backward
(and much longer on its first call per shape, like a kernel being loaded), one that runs out of
memory at long sequences. The fakes run next to the submission (see tests/checks/fake_attention.py)
and their records come back here. A GPU test runs the real attention into a real out-of-memory error.
"""

from __future__ import annotations

import pytest
import torch

from tests.checks.fake_attention import sweep_with_fake

ROW_KEYS = {"batch_size", "head_dim", "seq_len", "compiled", "forward_ms", "backward_ms", "memory_before_backward_bytes", "oom"}


def test_rows_cover_the_grid_in_order(adapters):
    fake = sweep_with_fake(
        adapters, {}, batch_size=3, head_dims=[4, 8], seq_lens=[16, 32], device="cpu", warmup_steps=1, measure_steps=2,
    )
    rows = fake.rows
    grid = [(row["head_dim"], row["seq_len"]) for row in rows]
    assert grid == [(4, 16), (4, 32), (8, 16), (8, 32)], (
        f"rows must follow head_dims (outer loop) × seq_lens (inner loop); got (head_dim, seq_len) {grid}"
    )
    for row in rows:
        assert set(row) == ROW_KEYS, f"row keys must be {sorted(ROW_KEYS)}; got {sorted(row)}"
        assert row["batch_size"] == 3 and row["compiled"] is False and row["oom"] is False, f"bad row {row}"
        assert row["memory_before_backward_bytes"] is None, "memory_before_backward_bytes is None on a CPU"
        for key in ("forward_ms", "backward_ms"):
            assert isinstance(row[key], float) and row[key] >= 0, f"{key} must be a float (ms); got {row[key]!r}"
    shapes = {shapes for shapes in fake.inputs}
    expected = {
        tuple(((3, n, d), torch.float32, True) for _ in range(3)) for d in (4, 8) for n in (16, 32)
    }
    assert shapes == expected, (
        "attention_fn must get Q, K, V of shape (batch_size, seq_len, head_dim), float32, requires_grad=True; "
        f"got {sorted(shapes)}"
    )


def test_times_forward_and_backward_apart_in_ms_without_warmup(adapters):
    forward_s, backward_s, first_s = 0.04, 0.02, 0.4
    behaviour = {"forward_s": forward_s, "backward_s": backward_s, "first_call_s": first_s}
    (row,) = sweep_with_fake(
        adapters, behaviour, batch_size=1, head_dims=[4], seq_lens=[8], device="cpu", warmup_steps=1, measure_steps=3,
    ).rows
    setup = (
        f"(fake attention: forward sleeps {forward_s * 1e3:.0f} ms, backward {backward_s * 1e3:.0f} ms, "
        f"the first call of each {first_s * 1e3:.0f} ms; warmup_steps=1, measure_steps=3)"
    )
    assert forward_s * 1e3 <= row["forward_ms"] < forward_s * 1e3 + 60, (
        f"forward_ms must be the mean time of one forward in milliseconds, warm-up excluded; got "
        f"{row['forward_ms']} {setup}"
    )
    assert backward_s * 1e3 <= row["backward_ms"] < (backward_s + forward_s) * 1e3, (
        f"backward_ms must be the mean time of one backward alone in milliseconds (no forward in it), "
        f"warm-up excluded; got {row['backward_ms']} {setup}"
    )


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_out_of_memory_is_a_row_not_a_crash(adapters, where):
    rows = sweep_with_fake(
        adapters, {f"oom_{where}_from": 32}, batch_size=2, head_dims=[4, 8], seq_lens=[16, 32], device="cpu",
        warmup_steps=1, measure_steps=1,
    ).rows
    assert [(row["head_dim"], row["seq_len"], row["oom"]) for row in rows] == [
        (4, 16, False), (4, 32, True), (8, 16, False), (8, 32, True)
    ], f"an out-of-memory error in the {where} pass must mark that row oom=True and the sweep go on; got {rows}"
    for row in rows:
        if row["oom"]:
            assert row["backward_ms"] is None, f"a measurement that ran out of memory must be None; got {row}"
            if where == "forward":
                assert row["forward_ms"] is None, f"a measurement that ran out of memory must be None; got {row}"
        else:
            assert isinstance(row["forward_ms"], float) and isinstance(row["backward_ms"], float), (
                f"a row that fit in memory must hold forward_ms and backward_ms as floats; got {row}"
            )


def test_default_attention_is_the_models(adapters):
    rows = adapters.run_attention_sweep(
        batch_size=2, head_dims=[8], seq_lens=[16], device="cpu", warmup_steps=1, measure_steps=2
    )
    assert len(rows) == 1 and rows[0]["oom"] is False and rows[0]["forward_ms"] > 0 and rows[0]["backward_ms"] > 0, (
        "with no attention passed in, the sweep must time the model's scaled_dot_product_attention: one row "
        f"(head_dim 8, seq_len 16), oom=False, positive forward_ms and backward_ms; got {rows}"
    )


def test_compiled_sweep_times_what_torch_compile_returned(adapters):
    # torch.compile is watched next to the submission and returns a stand-in that counts its calls.
    fake = sweep_with_fake(
        adapters, {}, batch_size=2, head_dims=[4], seq_lens=[8, 16], device="cpu", warmup_steps=1, measure_steps=2,
        compiled=True,
    )
    assert fake.compile_calls == 1, f"compiled=True must call torch.compile once per sweep; it was called {fake.compile_calls} times"
    assert fake.compiled_the_attention, "torch.compile must be applied to the attention being swept"
    assert fake.compiled_calls >= 2 * (1 + 2), "the timed calls must go through what torch.compile returned"
    rows = fake.rows
    assert all(row["compiled"] is True for row in rows), f"rows of a compiled sweep have compiled=True; got {rows}"


@pytest.mark.gpu
@pytest.mark.alone_on_gpu  # its times are bounded: no other test of the grade shares the GPU meanwhile
def test_gpu_sweep_measures_memory_and_survives_real_oom(adapters):
    rows = adapters.run_attention_sweep(
        batch_size=8, head_dims=[16], seq_lens=[1024, 1 << 20], device="cuda", warmup_steps=2, measure_steps=5
    )
    small, huge = rows
    assert small["oom"] is False and huge["oom"] is True, f"seq_len 2**20 cannot fit (35 TB of scores); rows {rows}"
    minimum = 8 * 1024 * 1024 * 4 + 4 * 8 * 1024 * 16 * 4  # softmax weights kept for backward, plus Q, K, V, O
    assert small["memory_before_backward_bytes"] >= minimum, (
        f"memory before backward must include the saved (8, 1024, 1024) float32 weights ({minimum} bytes at least); "
        f"got {small['memory_before_backward_bytes']}"
    )
    assert 0 < small["forward_ms"] < 100 and 0 < small["backward_ms"] < 100, (
        f"at (8, 1024, 64) forward and backward take well under 100 ms on a GPU: times are milliseconds; got {small}"
    )
