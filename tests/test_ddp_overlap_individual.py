"""Visible tests of §3.4 ddp_overlap_individual: each gradient's all-reduce starts during the backward.

The 'chain' model logs ("backward_reached", i) when the backward reaches layer i; layers'
weights have distinct sizes, so each logged all-reduce names its parameter. Overlap means:
the all-reduce of layer i's weight is launched before the backward reaches layer i - 1, and
its handle is not waited on before then either ('frozen_chain' adds a frozen weight, which
gets no all-reduce). The wrapper's state stays bounded: after several steps it holds no
handles of old steps, whether gradients are cleared with set_to_none=True or zeroed in place.
On two GPUs over NCCL the profiler judges too: in one step's GPU kernel timeline, some NCCL
kernel starts before the backward's last kernel ends.
"""

from __future__ import annotations

import pytest

from harness.ddp_checks import (all_reduces, assert_same_numels, check_overlap, check_overlap_in_gpu_profile,
                                check_state_stays_bounded, gradient_numels, run_ddp)


@pytest.mark.parametrize(("model", "world_size"), [("frozen", 3), ("tied", 2)])
def test_ddp_matches_single_process_training(adapters, model, world_size):
    run_ddp(adapters, "individual", model, world_size)


def test_ddp_all_reduces_each_gradient_once_per_step(adapters):
    ranks = run_ddp(adapters, "individual", "tied", 2, steps=2)
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_begin", step), ("synced", step))
            assert_same_numels(got, gradient_numels("tied"), f"rank {rank}, step {step}")


@pytest.mark.parametrize("model", ["chain", "frozen_chain"])
def test_ddp_all_reduces_overlap_the_backward(adapters, model):
    ranks = run_ddp(adapters, "individual", model, 2, steps=2)
    check_overlap(ranks, model, steps=2)


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeroed_in_place"])
def test_ddp_state_stays_bounded_over_steps(adapters, set_to_none):
    check_state_stays_bounded(adapters, "individual", set_to_none=set_to_none)


@pytest.mark.gpu(count=2)
def test_ddp_on_two_gpus_with_nccl_overlaps_the_backward(adapters):
    ranks = run_ddp(adapters, "individual", "lm", 2, steps=2, backend="nccl", optimizer="AdamW", lr=1e-2)
    ranks_chain = run_ddp(adapters, "individual", "chain", 2, steps=2, backend="nccl")
    # With NCCL a wait() does not block the CPU, but it makes the backward's stream wait for the
    # all-reduce: a handle waited on in the hook serialises the two on the GPU as well.
    check_overlap(ranks_chain, "chain", steps=2)
    assert ranks


@pytest.mark.gpu(count=2)
def test_ddp_overlap_shows_in_the_gpu_profile(adapters):
    check_overlap_in_gpu_profile(adapters)
