"""Visible tests of §3.6 optimizer_state_sharding: sharded AdamW trains like AdamW, each rank owning a share.

Every rank computes the same gradients (same model, same batch); the sharded optimizer must
leave every rank with the parameters plain AdamW reaches in one process. The optimizer class
passed to your wrapper logs which parameters each local optimizer holds, so the tests also
check that the ranks split the parameters between them. The optimizer's zero_grad must clear
every parameter's gradient, and a parameter group may have fewer parameters than there are
ranks (a rank then owns nothing of it): a crash there is weighted as the real bug it is (about
30% of this problem's points; see the handout, §3.6).
"""

from __future__ import annotations

import pytest

from harness.optimizer_state_sharding_checks import run_sharded_optimizer


@pytest.mark.parametrize(("model", "world_size"), [("frozen", 2), ("tied", 3), ("chain", 3)])
def test_sharded_adamw_matches_adamw(adapters, model, world_size):
    run_sharded_optimizer(adapters, model, world_size)


def test_sharded_optimizer_with_a_group_added_later(adapters):
    run_sharded_optimizer(adapters, "chain", 2, steps=4, split_at=2, add_group_at=2)


def test_sharded_optimizer_zero_grad_clears_every_gradient(adapters):
    run_sharded_optimizer(adapters, "chain", 2, steps=2, check_zero_grad=True)


def test_sharded_optimizer_with_fewer_parameters_than_ranks(adapters):
    # The first group holds one parameter: on 2 ranks, one rank owns nothing of it.
    run_sharded_optimizer(adapters, "chain", 2, steps=3, split_at=1, add_group_at=1)
