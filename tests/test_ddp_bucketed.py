"""Visible tests of §3.5 ddp_bucketed: gradients all-reduced in buckets of at most bucket_size_mb MiB.

Buckets are filled in the reverse of ``parameters()``'s order; a bucket closes when the next
parameter would take it over the limit. With the 'chain' model (weights of 120, 168, 126, 99
and 55 float32 elements) the tests know exactly which all-reduces to expect; 'frozen_chain'
freezes the 126-element weight, which must stay out of every bucket. The wrapper's state stays
bounded over steps, with gradients zeroed in place too.
"""

from __future__ import annotations

import pytest

from executor.probes.parallel_models import CHAIN_WIDTHS
from harness.ddp_checks import (all_reduces, assert_not_waited_before, assert_same_numels,
                                check_frozen_weight_left_out_of_buckets, check_state_stays_bounded, run_ddp)
from harness.parallel_runs import describe, step_events

CHAIN_NUMELS = [a * b for a, b in zip(CHAIN_WIDTHS, CHAIN_WIDTHS[1:])]
MIB = 2**20


@pytest.mark.parametrize(("model", "world_size", "bucket_size_mb"),
                         [("frozen", 2, 0.0004), ("tied", 3, None), ("tied", 2, 0.001)])
def test_ddp_bucketed_matches_single_process_training(adapters, model, world_size, bucket_size_mb):
    run_ddp(adapters, "bucketed", model, world_size, bucket_size_mb=bucket_size_mb)


@pytest.mark.parametrize(("bucket_bytes", "buckets"), [
    (4 * (55 + 99), [55 + 99, 126, 168, 120]),   # exactly two layers fit the first bucket
    (4 * 300, [55 + 99 + 126, 168 + 120]),
])
def test_ddp_bucketed_fills_buckets_in_reverse_order(adapters, bucket_bytes, buckets):
    ranks = run_ddp(adapters, "bucketed", "chain", 2, bucket_size_mb=bucket_bytes / MIB, steps=2)
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_begin", step), ("synced", step))
            assert_same_numels(got, buckets, f"rank {rank}, step {step}, bucket_size_mb = {bucket_bytes} bytes / 2**20 "
                                             f"(weights of {CHAIN_NUMELS[::-1]} float32 elements, last layer first)")


def test_ddp_bucketed_launches_a_full_bucket_during_the_backward(adapters):
    ranks = run_ddp(adapters, "bucketed", "chain", 2, bucket_size_mb=4 * (55 + 99) / MIB, steps=1)
    for rank, result in enumerate(ranks):
        events = step_events(result["events"], 0)
        first = next((i for i, e in enumerate(events) if e[0] == "all_reduce"), None)
        reached = events.index(("backward_reached", 1))
        assert first is not None and first < reached, (
            f"rank {rank}: the bucket of the last two layers is full once their gradients exist; its all-reduce "
            f"must start then, before the backward reaches layer 1; events:\n  {describe(events)}")
        assert_not_waited_before(result["events"], result["events"].index(events[first]),
                                 ("backward_reached", 1), f"rank {rank}: the bucket of the last two layers", 0)


def test_ddp_bucketed_leaves_frozen_weights_out_of_buckets(adapters):
    check_frozen_weight_left_out_of_buckets(adapters, 2, 4 * (55 + 99 + 168), [55 + 99 + 168, 120])


def test_ddp_bucketed_state_stays_bounded_over_steps(adapters):
    check_state_stays_bounded(adapters, "bucketed", set_to_none=False, bucket_size_mb=4 * 200 / MIB)
