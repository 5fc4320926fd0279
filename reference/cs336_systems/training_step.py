"""§3.8 training_step (the reference): FSDP, activation checkpointing and a chunked LM head with its loss.

Staff only. Why each part is there, for the official problem (about 8B parameters, 2 ranks,
one row of 32768 tokens a rank, bf16):

- memory of the training state: float32 weights (4 bytes a parameter), gradients (4) and
  AdamW's two moments (8) come to 16 bytes a parameter, about 130 GB for 8.1B parameters. On
  one H200 that leaves nothing for activations; sharded over two ranks with FSDP2
  (``fully_shard``, one unit per Transformer block, plus the embedding and the head) it is
  about 65 GB a rank. Weights are gathered in bf16 (``MixedPrecisionPolicy``) and gradients
  reduce-scattered in float32;
- activations: 34 blocks saving every intermediate of 32768 tokens would not fit; each block
  is checkpointed, so the backward keeps only each block's input (32768 x 4096 bf16 = 256 MiB
  a block) and recomputes the rest;
- attention: the provided model's reference attention materialises the (seq, seq) scores
  (32 heads x 32768^2, 64 GiB in bf16 per layer); the causal mask it is given is always the
  causal one, so ``F.scaled_dot_product_attention(is_causal=True)`` (a fused flash kernel)
  computes the same thing;
- the head: the logits of 32768 tokens over 151936 words are 9.3 GiB in bf16, 18.6 GiB as the
  float32 the loss wants; ``HeadLoss`` computes the normalisation, the head and the summed
  cross-entropy ``CHUNK_TOKENS`` tokens at a time, each chunk checkpointed, so at most one
  chunk's logits exist at once.

The step's loss is the mean cross-entropy over this rank's tokens; FSDP averages the gradients
over the ranks, so the update is the whole batch's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

CHUNK_TOKENS = 4096
"""Tokens whose logits exist at once in the head (4096 x 151936 float32: 2.3 GiB)."""


def causal_attention(Q, K, V, mask=None):
    """The provided model's attention for its causal mask, through PyTorch's fused kernel. (batch, heads, seq, d)."""
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


class HeadLoss(nn.Module):
    """ln_final, lm_head and the summed cross-entropy, chunk by chunk over the tokens."""

    def __init__(self, ln_final: nn.Module, lm_head: nn.Module):
        super().__init__()
        self.ln_final, self.lm_head = ln_final, lm_head

    def _chunk(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.ln_final(h))  # (chunk, vocab)
        return F.cross_entropy(logits.float(), targets, reduction="sum")

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h, t = x.flatten(0, 1), targets.flatten()  # (tokens, d_model), (tokens,)
        total = h.new_zeros((), dtype=torch.float32)
        chunk = max(1, min(CHUNK_TOKENS, h.shape[0] // 4))  # small runs still go through several chunks
        for start in range(0, h.shape[0], chunk):
            end = start + chunk
            total = total + checkpoint(self._chunk, h[start:end], t[start:end], use_reentrant=False)
        return total / h.shape[0]


class LossModel(nn.Module):
    """token ids and targets -> the mean cross-entropy: the provided model's forward with the loss fused in.

    Holds the model's embedding and blocks, and the head as ``HeadLoss``; each block is
    checkpointed (the backward keeps only its input).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.token_embeddings, self.layers = model.token_embeddings, model.layers
        self.head = HeadLoss(model.ln_final, model.lm_head)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.token_embeddings(inputs)  # (rows, seq, d_model)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)  # (rows, seq, d_model)
        return self.head(x, targets)


NAMES = {"head.ln_final.": "ln_final.", "head.lm_head.": "lm_head."}
"""LossModel's parameter names -> the provided model's."""


class TrainingStep:
    """One training step of the provided TransformerLM on this rank's rows; see the module docstring."""

    def __init__(self, model: torch.nn.Module, optimizer_settings: dict, compute_dtype: torch.dtype):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        for layer in model.layers:
            layer.attn.attention_fn = causal_attention
        self.net = LossModel(model)
        policy = {} if compute_dtype == torch.float32 else {
            "mp_policy": MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)}
        for layer in self.net.layers:
            fully_shard(layer, **policy)
        fully_shard(self.net.head, **policy)
        fully_shard(self.net, **policy)  # the root: the embedding, and the order of the others
        fused = {"fused": True} if next(self.net.parameters()).is_cuda else {}
        self.optimizer = torch.optim.AdamW(self.net.parameters(), **optimizer_settings, **fused)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.net(inputs, targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def full_parameters(self) -> dict[str, torch.Tensor]:
        full = {}
        for name, p in self.net.named_parameters():
            for ours, theirs in NAMES.items():
                name = name.replace(ours, theirs, 1) if name.startswith(ours) else name
            full[name] = p.full_tensor()
        return full
