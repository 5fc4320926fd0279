"""Hidden tests of §1.6 gradient_checkpointing: uneven groups, one group, bad block size, peak memory on a GPU."""

from __future__ import annotations

import pytest
import torch

from tests.checks.gradient_checkpointing_checks import OVERRIDES, check_checkpointed_forward


@pytest.mark.parametrize("block_size", [3, 1, 4])
def test_checkpointed_forward_other_block_sizes(adapters, block_size):
    check_checkpointed_forward(adapters, block_size, seed=block_size)


def test_checkpointed_forward_rejects_a_negative_block_size(adapters):
    model = adapters.get_transformer_lm(model_overrides=OVERRIDES)
    with pytest.raises(ValueError):
        adapters.run_checkpointed_lm_forward(model, torch.zeros(1, 4, dtype=torch.long), -1)


@pytest.mark.gpu
def test_peak_memory_falls_with_checkpointing_on_gpu(adapters):
    rows = adapters.run_peak_memory_by_block_size("small", block_sizes=[0, 3], context_length=256, device="cuda")
    assert [row["block_size"] for row in rows] == [0, 3], f"one row per block size, in order; got {rows}"
    plain, checkpointed = (row["peak_bytes"] for row in rows)
    assert 0 < checkpointed < 0.9 * plain, (
        f"peak memory of a forward + backward of the small LM (batch 4, context 256): {plain / 2**20:.0f} MiB without "
        f"checkpointing, {checkpointed / 2**20:.0f} MiB with groups of 3 layers; expected at least 10% less")
