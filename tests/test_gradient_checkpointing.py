"""Visible tests of §1.6 gradient_checkpointing: a checkpointed forward of the provided LM on the CPU.

Your forward runs next to your code on a 4-layer LM; the tests compare its logits and gradients
with a plain run, count each layer's forward passes, and count the bytes autograd saved for
the backward outside your checkpoints. Peak GPU memory is tested on a GPU.
"""

from __future__ import annotations

import pytest

from tests.checks.gradient_checkpointing_checks import check_checkpointed_forward


@pytest.mark.parametrize("block_size", [2, 0])
def test_checkpointed_forward_matches_the_plain_one(adapters, block_size):
    check_checkpointed_forward(adapters, block_size)
