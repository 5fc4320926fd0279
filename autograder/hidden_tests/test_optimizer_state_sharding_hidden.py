"""Hidden tests of §3.6 optimizer_state_sharding: the provided LM on 3 ranks, SGD, groups added later on 3 ranks,
more ranks than some groups have parameters (the first group and a later one), zero_grad clearing
every gradient, and repeated runs (the second in float64)."""

from __future__ import annotations

import pytest
import torch

from harness.optimizer_state_sharding_checks import run_sharded_optimizer


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr"),
                         [("lm", 3, "AdamW", 1e-2), ("frozen", 3, "SGD", 0.1), ("tied", 2, "AdamW", 0.1)])
def test_sharded_optimizer_matches_the_plain_one(adapters, model, world_size, optimizer, lr):
    run_sharded_optimizer(adapters, model, world_size, optimizer=optimizer, lr=lr)


@pytest.mark.parametrize(("model", "split_at", "add_group_at"), [("chain", 1, 1), ("lm", 4, 2), ("frozen", 3, 0)])
def test_sharded_optimizer_group_added_later_on_three_ranks(adapters, model, split_at, add_group_at):
    run_sharded_optimizer(adapters, model, 3, steps=3, split_at=split_at, add_group_at=add_group_at)


@pytest.mark.parametrize(("attempt", "dtype"), [(0, torch.float32), (1, torch.float64), (2, torch.bfloat16)],
                         ids=["0", "1-float64", "2-bfloat16"])
def test_sharded_optimizer_repeated(adapters, attempt, dtype):
    # The second run is in float64, from values float32 cannot hold: the parameters must stay float64 and
    # match the plain optimizer's within float64's rounding, so a broadcast through a float32 buffer fails.
    # The third is a 16-bit model: its parameters, broadcasts and local optimizers' steps stay bfloat16.
    run_sharded_optimizer(adapters, "chain", 3, seed=attempt + 5, dtype=dtype)


@pytest.mark.parametrize("world_size", [3])
def test_sharded_optimizer_zero_grad_clears_every_gradient(adapters, world_size):
    run_sharded_optimizer(adapters, "frozen", world_size, steps=2, check_zero_grad=True)


@pytest.mark.parametrize(("split_at", "add_group_at"), [(2, 2), (4, 1)], ids=["first_group", "later_group"])
def test_sharded_optimizer_fewer_parameters_than_ranks(adapters, split_at, add_group_at):
    # 'chain' has 5 weights: split at 2, the first group has 2 on 3 ranks; at 4, the group added later has 1.
    run_sharded_optimizer(adapters, "chain", 3, steps=3, split_at=split_at, add_group_at=add_group_at)


def test_sharded_optimizer_step_with_a_closure(adapters):
    # torch.optim's API: step(closure) calls the closure (which clears, forwards and backwards)
    # and returns its loss; a training loop written for any optimizer may rely on it.
    run_sharded_optimizer(adapters, "chain", 2, steps=3, closure=True)
