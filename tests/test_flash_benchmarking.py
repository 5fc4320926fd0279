"""Visible tests of §2.6 flash_benchmarking: the FlashAttention-vs-PyTorch sweep.

On a CPU the sweep gets fake implementations that count their forward and backward calls, and
a fake ``bench`` that runs the function once and returns a unique number: each number in a row
must then come from a ``bench`` call that ran exactly the right work (the fakes run next to
your code; see tests/checks/fake_flash.py). A GPU test runs your Triton FlashAttention-2 and PyTorch
attention under ``triton.testing.do_bench``.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from executor.probes import run_probe
from tests.checks.fake_flash import NAMES, PHASES, fake_sweep


def test_rows_cover_the_grid_with_every_key(adapters):
    rows = fake_sweep(
        adapters, seq_lens=[16, 32], head_dims=[16], dtypes=[torch.float32, torch.bfloat16], device="cpu",
    ).rows
    grid = [(row["seq_len"], row["head_dim"], row["dtype"]) for row in rows]
    assert grid == [(16, 16, "float32"), (16, 16, "bfloat16"), (32, 16, "float32"), (32, 16, "bfloat16")], (
        f"rows must follow seq_lens × head_dims × dtypes (outer to inner), dtype as a string like 'bfloat16'; got {grid}"
    )
    keys = {f"{name}_{phase}_ms" for name in NAMES for phase in PHASES}
    for row in rows:
        missing = (keys | {"batch_size", "is_causal", "oom"}) - set(row)
        assert not missing, f"row lacks {sorted(missing)}: {row}"
        assert row["batch_size"] == 1 and row["is_causal"] is True and row["oom"] == [], f"bad row {row}"


def test_each_number_times_the_right_work(adapters):
    fake = fake_sweep(
        adapters, seq_lens=[16], head_dims=[16, 32], dtypes=[torch.float32], device="cpu", batch_size=2,
    )
    rows, ran_by_value, log = fake.rows, fake.ran, fake.log
    assert len(ran_by_value) == 2 * 2 * 3, (
        f"expected 3 bench calls (forward, backward, forward_backward) per implementation and grid point "
        f"(12 in all); got {len(ran_by_value)}"
    )
    for row in rows:
        for name in NAMES:
            for phase in PHASES:
                value = row[f"{name}_{phase}_ms"]
                assert value in ran_by_value, f"{name}_{phase}_ms must be what bench returned; got {value!r}"
                ran = ran_by_value[value]
                expected = {
                    "forward": Counter({(name, "forward"): 1}),
                    "backward": Counter({(name, "backward"): 1}),
                    "forward_backward": Counter({(name, "forward"): 1, (name, "backward"): 1}),
                }[phase]
                assert ran == expected, (
                    f"the bench call behind {name}_{phase}_ms must run {dict(expected)} (nothing else); "
                    f"it ran {dict(ran)}"
                )
    shapes = {(shape, dtype, causal, grad) for _, shape, dtype, causal, grad in log}
    assert shapes == {((2, 16, 16), torch.float32, True, True), ((2, 16, 32), torch.float32, True, True)}, (
        "implementations must get Q of shape (batch_size, seq_len, head_dim) in the dtype asked for, "
        f"requires_grad=True, and is_causal; got {shapes}"
    )


def test_out_of_memory_is_recorded_and_the_sweep_goes_on(adapters):
    fake = fake_sweep(adapters, oom_from=32, seq_lens=[16, 32, 16], head_dims=[16], dtypes=[torch.float32], device="cpu")
    rows = fake.rows
    assert [row["oom"] for row in rows] == [[], ["triton"], []], (
        f"the implementation that ran out of memory goes in the row's 'oom' list; got {[row['oom'] for row in rows]}"
    )
    assert all(rows[1][f"triton_{phase}_ms"] is None for phase in PHASES), f"its timings are None; got {rows[1]}"
    assert all(rows[1][f"pytorch_{phase}_ms"] in fake.ran for phase in PHASES), (
        f"the other implementation is still timed; got {rows[1]}"
    )


def test_default_bench_on_cpu_returns_milliseconds(adapters):
    (row,) = fake_sweep(
        adapters, fake_bench=False, seq_lens=[16], head_dims=[16], dtypes=[torch.float32], device="cpu"
    ).rows
    for name in NAMES:
        for phase in PHASES:
            value = row[f"{name}_{phase}_ms"]
            assert isinstance(value, float) and 0 < value < 1000, f"{name}_{phase}_ms must be milliseconds; got {value!r}"


@pytest.mark.gpu
@pytest.mark.timing  # the submission's autotuners tune, as they would when benchmarked
def test_gpu_default_compares_flash_triton_with_pytorch_under_do_bench(adapters):
    seen = run_probe(adapters, "flash_benchmarking.watched_do_bench",
                     {"seq_lens": [1024], "head_dims": [64], "dtypes": [torch.bfloat16], "device": "cuda"})
    (row,), returned = seen["rows"], seen["returned"]
    assert len(returned) == 6, f"on CUDA every timing comes from triton.testing.do_bench (6 calls); got {len(returned)}"
    for name in ("triton", "pytorch"):
        for phase in PHASES:
            value = row[f"{name}_{phase}_ms"]
            assert value in returned, f"{name}_{phase}_ms must be do_bench's result; got {value!r} (do_bench gave {returned})"
    assert row["oom"] == []
