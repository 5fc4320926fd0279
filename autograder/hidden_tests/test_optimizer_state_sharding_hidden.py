"""Hidden tests of §3.6 optimizer_state_sharding: the provided LM on 3 ranks, SGD, groups added later on 3 ranks,
more ranks than some groups have parameters, and repeated runs."""

from __future__ import annotations

import pytest

from tests.parallel_checks import run_sharded_optimizer


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr"),
                         [("lm", 3, "AdamW", 1e-2), ("frozen", 3, "SGD", 0.1), ("tied", 2, "AdamW", 0.1)])
def test_sharded_optimizer_matches_the_plain_one(adapters, model, world_size, optimizer, lr):
    run_sharded_optimizer(adapters, model, world_size, optimizer=optimizer, lr=lr)


@pytest.mark.parametrize(("model", "split_at", "add_group_at"), [("chain", 1, 1), ("lm", 4, 2), ("frozen", 3, 0)])
def test_sharded_optimizer_group_added_later_on_three_ranks(adapters, model, split_at, add_group_at):
    run_sharded_optimizer(adapters, model, 3, steps=3, split_at=split_at, add_group_at=add_group_at)


@pytest.mark.parametrize("attempt", range(2))
def test_sharded_optimizer_repeated(adapters, attempt):
    run_sharded_optimizer(adapters, "chain", 3, seed=attempt + 5)
