"""Hidden tests of §3.2 naive_ddp: the provided LM on 3 ranks with AdamW, an unused parameter under AdamW
(in float64), a chain in bfloat16 (gradients sent and kept in the model's dtype), call counts."""

from __future__ import annotations

import pytest
import torch

from harness.ddp_checks import all_reduces, assert_same_numels, gradient_numels, run_ddp


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr", "dtype"),
                         [("lm", 3, "AdamW", 1e-2, "float32"), ("frozen", 2, "AdamW", 1e-2, "float64"),
                          ("chain", 3, "SGD", 0.05, "bfloat16")])
def test_naive_ddp_matches_single_process_training(adapters, model, world_size, optimizer, lr, dtype):
    run_ddp(adapters, "naive", model, world_size, optimizer=optimizer, lr=lr, dtype=getattr(torch, dtype))


def test_naive_ddp_all_reduce_count_on_three_ranks(adapters):
    ranks = run_ddp(adapters, "naive", "frozen", 3, steps=2)
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_end", step), ("synced", step))
            assert_same_numels(got, gradient_numels("frozen"), f"rank {rank}, step {step} (frozen and unused "
                                                               "parameters have no gradient to reduce)")
