"""Hidden tests of §3.3 ddp_flat: the provided LM, AdamW, and one all-reduce on 3 ranks."""

from __future__ import annotations

import pytest

from tests.checks.parallel_checks import all_reduces, gradient_numels, run_ddp


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr"),
                         [("lm", 2, "AdamW", 1e-2), ("chain", 3, "SGD", 0.05)])
def test_ddp_flat_matches_single_process_training(adapters, model, world_size, optimizer, lr):
    run_ddp(adapters, "flat", model, world_size, optimizer=optimizer, lr=lr)


def test_ddp_flat_one_all_reduce_on_three_ranks(adapters):
    ranks = run_ddp(adapters, "flat", "tied", 3, steps=2)
    total = sum(gradient_numels("tied"))
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_end", step), ("synced", step))
            assert got == [total], f"rank {rank}, step {step}: expected one all-reduce of {total} elements; got {got}"
