"""Hidden tests of §3.4 ddp_overlap_individual: the provided LM, CS336 2025's adapter names, an unused
parameter under AdamW, and the overlap on 3 ranks, repeated to catch races."""

from __future__ import annotations

import pytest

from tests.executor.probes.parallel_models import CHAIN_WIDTHS
from tests.parallel_checks import (all_reduces, assert_same_numels, describe, gradient_numels, launch_position,
                                   run_ddp, step_events)

CHAIN_NUMELS = [a * b for a, b in zip(CHAIN_WIDTHS, CHAIN_WIDTHS[1:])]


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr"),
                         [("lm", 3, "AdamW", 1e-2), ("frozen", 2, "AdamW", 1e-2)])
def test_ddp_matches_single_process_training(adapters, model, world_size, optimizer, lr):
    run_ddp(adapters, "individual", model, world_size, optimizer=optimizer, lr=lr)


def test_ddp_2025_adapter_names(adapters):
    ranks = run_ddp(adapters, "individual", "tied", 3, api="2025", steps=2)
    for rank, result in enumerate(ranks):
        got = all_reduces(result["events"], ("backward_begin", 1), ("synced", 1))
        assert_same_numels(got, gradient_numels("tied"), f"rank {rank}, step 1, through get_ddp_individual_parameters")


@pytest.mark.parametrize("attempt", range(3))
def test_ddp_overlap_on_three_ranks(adapters, attempt):
    ranks = run_ddp(adapters, "individual", "chain", 3, steps=2, seed=attempt)
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(2):
            for layer in range(1, len(CHAIN_NUMELS)):
                launched = launch_position(events, CHAIN_NUMELS[layer], step)
                reached = events.index(("backward_reached", layer - 1), events.index(("step", step)))
                assert launched < reached, (
                    f"rank {rank}, step {step}: layer {layer}'s all-reduce must start before the backward reaches "
                    f"layer {layer - 1}; events:\n  {describe(step_events(events, step))}")
            assert all(e[3] for e in step_events(events, step) if e[0] == "all_reduce"), (
                f"rank {rank}, step {step}: launch the all-reduces with async_op=True, or each one blocks the "
                f"backward until every rank has sent its gradient; events:\n  {describe(step_events(events, step))}")
