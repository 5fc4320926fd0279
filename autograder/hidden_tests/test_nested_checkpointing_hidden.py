"""Hidden tests of §1.7 nested_checkpointing: every layer count to 300, and large chains where O(sqrt N) fails."""

from __future__ import annotations

import pytest

from tests.checks.checkpoint_plans import check_plan


def test_nested_plan_for_every_count_to_300(adapters):
    for n in range(1, 301):
        check_plan(adapters.run_nested_checkpoint_plan(n), n)


@pytest.mark.parametrize("num_layers", [1023, 1024, 4096])
def test_nested_plan_for_long_chains(adapters, num_layers):
    check_plan(adapters.run_nested_checkpoint_plan(num_layers), num_layers)
