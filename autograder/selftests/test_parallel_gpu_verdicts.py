"""The verdicts of part 2's two-GPU tests, on made-up observations: what passes, what fails, and why.

Staff only. The GPU tests (DDP overlap in the profiler's timeline, FSDP memory) need two GPUs;
their verdicts are plain functions of what the probes return, so here they run on the CPU
against timelines and memory figures shaped like those of the reference and of the mutants
``ddp_all_reduce_at_the_end`` and ``fsdp_keeps_full_weights_after_forward`` (numbers of the same
order as two H200s gave: records/2026-12-01-h200x2-part2/parallel_profile.md). The trace parser
runs on a small hand-written trace.
"""

from __future__ import annotations

import pytest

from executor.probes.ddp_profile import BACKWARD_RANGE, kernel_timeline
from harness.ddp_checks import judge_overlap
from harness.fsdp_checks import fsdp_memory_limits, judge_fsdp_memory

MIB = 2**20


def _kernel(name: str, start: float, duration: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": duration,
            "args": {"correlation": correlation}}


def _launch(start: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": start, "dur": 2,
            "args": {"correlation": correlation}}


def test_kernel_timeline_sorts_kernels_by_what_launched_them():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": BACKWARD_RANGE, "ts": 100, "dur": 50},
        _launch(90, 1), _kernel("ampere_sgemm_fwd", 95, 10, 1),       # launched before the backward
        _launch(110, 2), _kernel("ampere_sgemm_bwd", 120, 30, 2),     # launched inside it
        _launch(130, 3), _kernel("ncclDevKernel_AllReduce_Sum_f32", 135, 40, 3),
        _launch(170, 4), _kernel("vectorized_elementwise_div", 180, 5, 4),  # after it
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 111, "dur": 5, "args": {}},
    ]}
    assert kernel_timeline(trace) == [("other", 95.0, 105.0), ("backward", 120.0, 150.0), ("nccl", 135.0, 175.0),
                                      ("other", 180.0, 185.0)]


def test_overlap_verdict_accepts_an_all_reduce_during_the_backward():
    judge_overlap([("backward", 0, 400), ("nccl", 150, 900), ("backward", 400, 700), ("other", 900, 910)], "here")


@pytest.mark.parametrize(("kernels", "says"), [
    ([("backward", 0, 400), ("backward", 400, 700), ("nccl", 700, 900), ("nccl", 900, 1000)], "none of the step's 2"),
    ([("backward", 0, 400), ("other", 400, 410)], "no NCCL kernel"),
    ([("nccl", 0, 400)], "no GPU kernel launched during loss.backward()"),
], ids=["all_reduce_at_the_end", "no_nccl", "no_backward"])
def test_overlap_verdict_rejects(kernels, says):
    with pytest.raises(AssertionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        judge_overlap(kernels, "here")


def test_memory_verdict_accepts_shards_and_a_short_window():
    limits = fsdp_memory_limits(2)
    judge_fsdp_memory({"held": limits["shards"] + MIB, "forward_peak": 2 * limits["layer"] + MIB}, 2, "here")


@pytest.mark.parametrize(("held_layers", "forward_layers", "says"), [
    (16, 2, "after get_fsdp"),      # nothing sharded: the whole model stays on every rank
    (8, 16, "forward's allocations peaked"),  # every layer's full weight alive by the end of the forward
], ids=["not_sharded", "keeps_full_weights"])
def test_memory_verdict_rejects(held_layers, forward_layers, says):
    layer = fsdp_memory_limits(2)["layer"]
    with pytest.raises(AssertionError, match=says):
        judge_fsdp_memory({"held": held_layers * layer, "forward_peak": forward_layers * layer}, 2, "here")
