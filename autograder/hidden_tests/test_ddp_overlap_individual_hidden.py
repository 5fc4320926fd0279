"""Hidden tests of §3.4 ddp_overlap_individual: the provided LM, CS336 2025's adapter names (on a
bfloat16 model), an unused parameter under AdamW (in float64), the gradients sent and kept in
the model's dtype, the overlap on 3 ranks (launched during the backward and not waited on
there), repeated to catch races, a frozen weight that gets no all-reduce, and state that stays
bounded over steps under both zero_grad modes."""

from __future__ import annotations

import pytest
import torch

from harness.ddp_checks import (all_reduces, assert_same_numels, check_overlap, check_state_stays_bounded,
                                gradient_numels, run_ddp)


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr", "dtype"),
                         [("lm", 3, "AdamW", 1e-2, "float32"), ("frozen", 2, "AdamW", 1e-2, "float64")])
def test_ddp_matches_single_process_training(adapters, model, world_size, optimizer, lr, dtype):
    run_ddp(adapters, "individual", model, world_size, optimizer=optimizer, lr=lr, dtype=getattr(torch, dtype))


def test_ddp_2025_adapter_names(adapters):
    ranks = run_ddp(adapters, "individual", "tied", 3, api="2025", steps=2, dtype=torch.bfloat16)  # values, dtypes too
    for rank, result in enumerate(ranks):
        got = all_reduces(result["events"], ("backward_begin", 1), ("synced", 1))
        assert_same_numels(got, gradient_numels("tied"), f"rank {rank}, step 1, through get_ddp_individual_parameters")


@pytest.mark.parametrize("attempt", range(3))
def test_ddp_overlap_on_three_ranks(adapters, attempt):
    ranks = run_ddp(adapters, "individual", "chain", 3, steps=2, seed=attempt)
    check_overlap(ranks, "chain", steps=2)


def test_ddp_frozen_weight_is_not_all_reduced(adapters):
    ranks = run_ddp(adapters, "individual", "frozen_chain", 3, steps=2, optimizer="AdamW", lr=1e-2)
    check_overlap(ranks, "frozen_chain", steps=2)


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeroed_in_place"])
def test_ddp_state_stays_bounded(adapters, set_to_none):
    check_state_stays_bounded(adapters, "individual", set_to_none=set_to_none, world_size=3)


def test_ddp_forward_passes_keyword_arguments(adapters):
    # The wrapper is an nn.Module: ddp(x=inputs) must reach the module's forward as module(x=inputs).
    run_ddp(adapters, "individual", "tied", 2, steps=2, keyword_input=True)
