"""§1.6 gradient_checkpointing: trade recomputation for activation memory in the provided LM.

You write ``checkpointed_lm_forward`` and ``peak_memory_by_block_size`` (see
handout/README.md, §1.6), then plot peak memory against the block size for the provided model.
"""

from __future__ import annotations

from typing import Any

import torch

from cs336_systems import model_sizes
from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.6 gradient_checkpointing"


def checkpointed_lm_forward(model: torch.nn.Module, token_ids: torch.Tensor, block_size: int) -> torch.Tensor:
    """The provided ``TransformerLM``'s forward, with its layers checkpointed in groups of ``block_size``.

    Compute exactly what ``model(token_ids)`` computes (``model.token_embeddings``, then each of
    ``model.layers`` in order, then ``model.ln_final`` and ``model.lm_head``), but run each group
    of ``block_size`` consecutive layers (the last group may be shorter) through
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, so that only the group's
    input is kept for the backward and the group's forward is recomputed there. With
    ``block_size`` 0, checkpoint nothing (a plain forward).

    Args:
        model: a ``cs336_systems.model.TransformerLM``.
        token_ids: (batch, seq) integer token ids, seq <= ``model.context_length``.
        block_size: layers per checkpointed group; an int >= 0.

    Returns:
        Logits (batch, seq, vocab_size), equal to ``model(token_ids)``; gradients of a loss on
        them equal the plain forward's.

    Raises:
        ValueError: ``block_size`` is not an int >= 0; seq > ``model.context_length``.
    """
    raise not_implemented(__file__, "checkpointed_lm_forward", _SECTION)


def peak_memory_by_block_size(
    model_size: str,
    *,
    block_sizes: list[int],
    context_length: int,
    device: str | torch.device,
    batch_size: int = model_sizes.BATCH_SIZE,
    model_overrides: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Peak GPU memory of one forward + backward of the provided model for each block size.

    Build the model once (``model_sizes.build_model``) on the CUDA ``device``, draw random
    token ids (batch_size, context_length) as inputs and targets, and for each block size in
    order: zero the gradients (set to None), ``torch.cuda.reset_peak_memory_stats``, run
    :func:`checkpointed_lm_forward`, cross-entropy over the flattened logits, backward, and read
    ``torch.cuda.max_memory_allocated``.

    Returns:
        ``[{"block_size": int, "peak_bytes": int}, ...]`` in the order of ``block_sizes``.

    Raises:
        ValueError: ``device`` is not a CUDA device (peak memory is CUDA's allocator's).
    """
    raise not_implemented(__file__, "peak_memory_by_block_size", _SECTION)
