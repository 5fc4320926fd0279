"""Visible tests of §3.2 naive_ddp: broadcast the initial parameters, all-reduce each gradient after the backward.

Each test starts 2 or 3 ranks (gloo, on the CPU) next to your code; every rank trains its own
slice of the batch, and the tests compare every rank with the same model trained on the whole
batch in one process (harness/ddp_checks.py). Ranks start from different values, so a
missing broadcast shows; the models hold a frozen bias, a parameter the forward never uses,
a buffer and a tied weight.
"""

from __future__ import annotations

import pytest

from harness.ddp_checks import all_reduces, assert_same_numels, gradient_numels, run_ddp


@pytest.mark.parametrize(("model", "world_size"), [("frozen", 2), ("tied", 3)])
def test_naive_ddp_matches_single_process_training(adapters, model, world_size):
    run_ddp(adapters, "naive", model, world_size)


def test_naive_ddp_all_reduces_each_gradient_once(adapters):
    ranks = run_ddp(adapters, "naive", "tied", 2, steps=2)
    expected = gradient_numels("tied")
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_end", step), ("synced", step))
            assert_same_numels(got, expected, f"rank {rank}, step {step}: all_reduce_gradients on the 'tied' model "
                                              "(the tied weight is one parameter: reduce it once)")
