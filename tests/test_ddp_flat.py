"""Visible tests of §3.3 ddp_flat: one all-reduce of every gradient, flattened into one buffer.

Ranks start from equal values here (this problem does not broadcast); each trains its slice
of the batch and must end where one process training the whole batch ends.
"""

from __future__ import annotations

import pytest

from harness.ddp_checks import all_reduces, gradient_numels, run_ddp


@pytest.mark.parametrize(("model", "world_size"), [("frozen", 3), ("tied", 2)])
def test_ddp_flat_matches_single_process_training(adapters, model, world_size):
    run_ddp(adapters, "flat", model, world_size)


def test_ddp_flat_makes_one_all_reduce_per_step(adapters):
    ranks = run_ddp(adapters, "flat", "frozen", 2, steps=2)
    total = sum(gradient_numels("frozen"))
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_end", step), ("synced", step))
            assert got == [total], (
                f"rank {rank}, step {step}: expected exactly one all-reduce of all {total} gradient elements "
                f"(every parameter with a gradient, flattened); logged all-reduces of {got} elements")
