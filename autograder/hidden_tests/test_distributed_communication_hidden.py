"""Hidden tests of §3.1 distributed_communication: the timer, a bad size, the command line on 2 processes, NCCL."""

from __future__ import annotations

import pytest
import torch

from tests.checks import timing_checks
from tests.checks.distributed_communication_checks import as_time_steps, run_benchmark, table_rows
from executor.probes import run_probe
from executor.probes.distributed_communication import PNG_MAGIC
from tests.checks.model_spies import outcome_value


def test_time_all_reduce_uses_the_given_timer_and_a_real_sync(adapters):
    time_steps = as_time_steps(adapters, torch.zeros(4))
    timing_checks.check_uses_given_timer(time_steps)
    timing_checks.check_real_sync_is_timed(time_steps)


def test_benchmark_all_reduce_rejects_a_size_that_is_not_float32_elements(adapters):
    with pytest.raises(ValueError):  # checked before any collective: no process group is needed to see it
        adapters.run_benchmark_all_reduce(1001, warmup_steps=1, measure_steps=1, device="cpu")


def test_cli_runs_two_gloo_processes_without_warmup_and_plots(adapters):
    argv = ["--backend", "gloo", "--sizes-mb", "0.001", "0.01", "--world-sizes", "2", "--warmup-steps", "0",
            "--measure-steps", "2", "--plot", "{plot}"]
    seen = run_probe(adapters, "distributed_communication.run_cli", argv)
    status = outcome_value(seen["outcome"])
    assert status == 0, f"the command line {argv} must return 0; got {status}; stderr:\n{seen['stderr'][-2000:]}"
    rows = table_rows(seen["stdout"])
    expected = [["gloo", "2", f"{max(4, int(mb * 2**20) // 4 * 4) / 2**20:g}"] for mb in (0.001, 0.01)]
    assert [row[:3] for row in rows] == expected, (
        f"expected one table row per size, starting {expected}; stdout was:\n{seen['stdout'][-2000:]}")
    assert all(float(row[3]) > 0 for row in rows), f"every mean must be a positive time in ms: {rows}"
    assert seen["png_head"] == PNG_MAGIC, f"--plot must write a PNG; its first bytes were {seen['png_head']!r}"


@pytest.mark.gpu(count=2)
def test_benchmark_all_reduce_with_nccl_on_two_gpus(adapters):
    ranks = run_benchmark(adapters, 2, 2**20, warmup_steps=3, measure_steps=5, backend="nccl")
    busbw = ranks[0]["value"]["busbw_gbps"]
    assert busbw > 1.0, f"1 MB all-reduces between two GPUs with NCCL ran at a bus bandwidth of {busbw:.3f} GB/s; " \
                        "expected more than 1 GB/s: is the tensor on the GPU, and the sync after each all-reduce?"
