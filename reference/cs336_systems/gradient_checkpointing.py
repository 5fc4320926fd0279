"""§1.6 gradient_checkpointing: trade recomputation for activation memory in the provided LM.

Reference solution. Without checkpointing, the backward needs every activation that every
layer saved in the forward: memory grows with the number of layers. Checkpointing a group of
``block_size`` consecutive layers keeps only the group's input; the backward recomputes the
group's forward and frees it again. With N layers in groups of k, the peak holds about N / k
group inputs plus one group's activations (k layers' worth): smallest near k = sqrt(N), at the
price of one more forward pass of every checkpointed layer.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from cs336_systems import model_sizes


def checkpointed_lm_forward(model: torch.nn.Module, token_ids: torch.Tensor, block_size: int) -> torch.Tensor:
    """The provided TransformerLM's forward, each group of ``block_size`` layers checkpointed (0: none)."""
    if not isinstance(block_size, int) or block_size < 0:
        raise ValueError(f"block_size must be an integer >= 0 (0: no checkpointing); got {block_size!r}")
    seq = token_ids.shape[-1]
    if seq > model.context_length:
        raise ValueError(f"input has {seq} tokens but the model takes at most context_length={model.context_length}")
    x = model.token_embeddings(token_ids)  # (batch, seq, d_model)
    layers = list(model.layers)
    if block_size == 0:
        for layer in layers:
            x = layer(x)  # (batch, seq, d_model)
    else:
        for start in range(0, len(layers), block_size):
            group = layers[start:start + block_size]
            x = checkpoint(_run_group, group, x, use_reentrant=False)  # (batch, seq, d_model); keeps only x
    return model.lm_head(model.ln_final(x))  # (batch, seq, vocab_size)


def peak_memory_by_block_size(
    model_size: str,
    *,
    block_sizes: list[int],
    context_length: int,
    device: str | torch.device,
    batch_size: int = model_sizes.BATCH_SIZE,
    model_overrides: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Peak CUDA memory of one forward + backward for each block size: [{"block_size", "peak_bytes"}]."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"peak memory is measured with torch.cuda.max_memory_allocated; device must be CUDA, got {device}")
    size = model_sizes.get_model_size(model_size, model_overrides)
    model = model_sizes.build_model(size, device=device)
    inputs = torch.randint(0, size.vocab_size, (batch_size, context_length), device=device)  # (batch, seq)
    targets = torch.randint(0, size.vocab_size, (batch_size, context_length), device=device)  # (batch, seq)
    rows = []
    for block_size in block_sizes:
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        logits = checkpointed_lm_forward(model, inputs, block_size)  # (batch, seq, vocab)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        del logits
        torch.cuda.synchronize(device)
        rows.append({"block_size": block_size, "peak_bytes": torch.cuda.max_memory_allocated(device)})
    return rows


def _run_group(group: list[torch.nn.Module], x: torch.Tensor) -> torch.Tensor:
    for layer in group:
        x = layer(x)  # (batch, seq, d_model)
    return x
