"""Visible tests of §1.7 nested_checkpointing: the plan covers the layers and meets the O(log N) bound on the memory model."""

from __future__ import annotations

import pytest

from tests.checks.checkpoint_plans import check_plan


@pytest.mark.parametrize("num_layers", [1, 2, 3, 7, 34, 48, 64, 100])
def test_nested_plan_meets_the_log_bound(adapters, num_layers):
    check_plan(adapters.run_nested_checkpoint_plan(num_layers), num_layers)


def test_nested_plan_rejects_a_bad_layer_count(adapters):
    with pytest.raises(ValueError):
        adapters.run_nested_checkpoint_plan(0)
