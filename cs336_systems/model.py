"""The Transformer language model you benchmark and profile (provided: read it, don't rewrite it).

This is the model of CS336 assignment 1, written out so that this assignment does not depend on
your solution to that one: a token embedding, ``num_layers`` pre-norm blocks (RMSNorm, causal
multi-head self-attention with RoPE, RMSNorm, SwiGLU feed-forward, each with a residual
connection), a final RMSNorm and an LM head. Shapes are written with jaxtyping; tensor lines
carry shape comments.

What is not here comes from PyTorch: the loss is ``torch.nn.functional.cross_entropy`` and the
optimizer is ``torch.optim.AdamW``. Build a model of one of the five assignment sizes with
``cs336_systems.model_sizes.build_model``.

Swapping the attention function
-------------------------------
§1.2 (nsys_profile) replaces attention with a version annotated with NVTX ranges. An attention
function has the signature of :func:`scaled_dot_product_attention`,
``fn(Q, K, V, mask) -> O``, and the model calls it with

* ``Q``, ``K``, ``V`` of shape (batch, num_heads, seq, d_head), RoPE already applied to Q and K;
* ``mask`` of shape (seq, seq), dtype bool, True where query i may attend to key j (i >= j).

Two supported ways to swap it, pick either:

* at construction: ``TransformerLM(..., attention_fn=fn)`` (or ``build_model(..., attention_fn=fn)``);
  that model always uses ``fn``;
* for a region of code: ``with use_attention(fn): model(x)``; every model built without an
  ``attention_fn`` uses ``fn`` inside the ``with`` block and the default again after it.

Models built without ``attention_fn`` look up :func:`scaled_dot_product_attention` in this
module at call time, so assigning ``cs336_systems.model.scaled_dot_product_attention = fn``
(the way CS336 does it) works as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from einops import einsum, rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

AttentionFn = Callable[..., Tensor]
"""``fn(Q, K, V, mask) -> O``: the signature of :func:`scaled_dot_product_attention`."""


# --------------------------------------------------------------------------------------
# Attention, and the hook to swap it
# --------------------------------------------------------------------------------------


def softmax(x: Float[Tensor, "..."], dim: int) -> Float[Tensor, "..."]:
    """Softmax along ``dim``, stable for large inputs: the row maximum is subtracted before exp."""
    shifted = x - torch.amax(x, dim=dim, keepdim=True)  # (...), each row's max is now 0
    exps = torch.exp(shifted)  # (...)
    return exps / torch.sum(exps, dim=dim, keepdim=True)  # (...)


def scaled_dot_product_attention(
    Q: Float[Tensor, "... queries d_k"],
    K: Float[Tensor, "... keys d_k"],
    V: Float[Tensor, "... keys d_v"],
    mask: Bool[Tensor, "... queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    """softmax(Q K^T / sqrt(d_k)) V, with masked-out scores set to -inf before the softmax.

    ``mask`` is True where a query may attend to a key; it broadcasts against the scores. Every
    query must be allowed at least one key (a fully masked row gives NaN). Returns a tensor of
    V's dtype with the queries' leading shape.
    """
    d_k = Q.shape[-1]
    scores = einsum(Q, K, "... queries d_k, ... keys d_k -> ... queries keys") / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., q, k)
    weights = softmax(scores, dim=-1)  # (..., q, k), rows sum to 1
    return einsum(weights, V, "... queries keys, ... keys d_v -> ... queries d_v")  # (..., q, d_v)


_attention_override: AttentionFn | None = None


def current_attention() -> AttentionFn:
    """The attention function a model built without ``attention_fn`` uses right now."""
    if _attention_override is not None:
        return _attention_override
    return scaled_dot_product_attention


@contextmanager
def use_attention(fn: AttentionFn) -> Iterator[AttentionFn]:
    """Make every model built without ``attention_fn`` use ``fn`` inside the ``with`` block.

    ``fn`` has the signature of :func:`scaled_dot_product_attention`. Blocks may be nested; on
    exit (exceptions included) the previous attention function is restored.
    """
    if not callable(fn):
        raise TypeError(f"use_attention expects a function fn(Q, K, V, mask); got {type(fn).__name__}")
    global _attention_override
    previous = _attention_override
    _attention_override = fn
    try:
        yield fn
    finally:
        _attention_override = previous


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------


class Linear(nn.Module):
    """y = x W^T without bias; W of shape (d_out, d_in), truncated-normal init (std sqrt(2/(d_in+d_out)))."""

    def __init__(self, d_in: int, d_out: int, device=None, dtype=None):
        super().__init__()
        std = math.sqrt(2.0 / (d_in + d_out))
        self.weight = nn.Parameter(torch.empty(d_out, d_in, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        return einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")


class Embedding(nn.Module):
    """Token id -> vector lookup; table of shape (vocab_size, d_model), truncated-normal init."""

    def __init__(self, vocab_size: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        return self.weight[token_ids]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gain, computed in float32 and returned in x's dtype."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return (x / rms * self.weight).to(in_dtype)  # (..., d_model)


class SwiGLU(nn.Module):
    """Feed-forward W2 (SiLU(W1 x) * W3 x), with inner width d_ff."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        gate = self.w1(x)  # (..., d_ff)
        return self.w2(gate * torch.sigmoid(gate) * self.w3(x))  # (..., d_model)


class RotaryPositionalEmbedding(nn.Module):
    """RoPE: rotates each pair of dimensions (2i, 2i+1) of position p by the angle p * theta^(-2i/d_k).

    The rotation depends only on the position, so the dot product of a rotated query at
    position m and a rotated key at position n depends on m - n, not on m and n.
    """

    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        if d_k % 2 != 0:
            raise ValueError(f"RoPE needs an even head dimension d_k; got {d_k}")
        inv_freq = theta ** (-torch.arange(0, d_k, 2, device=device, dtype=torch.float32) / d_k)  # (d_k/2,)
        positions = torch.arange(max_seq_len, device=device, dtype=torch.float32)  # (max_seq_len,)
        angles = einsum(positions, inv_freq, "pos, pair -> pos pair")  # (max_seq_len, d_k/2)
        self.register_buffer("cos", torch.cos(angles), persistent=False)
        self.register_buffer("sin", torch.sin(angles), persistent=False)

    def forward(
        self, x: Float[Tensor, "... seq d_k"], token_positions: Int[Tensor, "... seq"]
    ) -> Float[Tensor, "... seq d_k"]:
        cos = self.cos[token_positions].to(x.dtype)  # (..., seq, d_k/2)
        sin = self.sin[token_positions].to(x.dtype)  # (..., seq, d_k/2)
        pairs = rearrange(x, "... seq (pair two) -> ... seq pair two", two=2)
        even, odd = pairs[..., 0], pairs[..., 1]  # (..., seq, d_k/2) each
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., seq, d_k/2, 2)
        return rearrange(rotated, "... seq pair two -> ... seq (pair two)")


class CausalMultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with RoPE on queries and keys and a causal mask.

    ``attention_fn`` (optional) replaces :func:`scaled_dot_product_attention` for this layer; see
    the module docstring for its signature. None means :func:`current_attention` at call time.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        rope: RotaryPositionalEmbedding,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.q_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.output_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.rope = rope
        self.attention_fn = attention_fn

    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        seq = x.shape[-2]
        Q, K, V = (
            rearrange(proj(x), "batch seq (heads d_head) -> batch heads seq d_head", heads=self.num_heads)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )  # (batch, heads, seq, d_head) each
        positions = torch.arange(seq, device=x.device)  # (seq,)
        Q = self.rope(Q, positions)  # (batch, heads, seq, d_head)
        K = self.rope(K, positions)  # (batch, heads, seq, d_head)
        causal_mask = positions[:, None] >= positions[None, :]  # (seq, seq), True: query may see key
        attention = self.attention_fn if self.attention_fn is not None else current_attention()
        out = attention(Q, K, V, causal_mask)  # (batch, heads, seq, d_head)
        return self.output_proj(rearrange(out, "batch heads seq d_head -> batch seq (heads d_head)"))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + Attn(RMSNorm(x)), then y + SwiGLU(RMSNorm(y))."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        rope: RotaryPositionalEmbedding,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.ln1 = RMSNorm(d_model, device=device, dtype=dtype)
        self.attn = CausalMultiHeadSelfAttention(d_model, num_heads, rope, attention_fn, device=device, dtype=dtype)
        self.ln2 = RMSNorm(d_model, device=device, dtype=dtype)
        self.ffn = SwiGLU(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        x = x + self.attn(self.ln1(x))  # (batch, seq, d_model)
        return x + self.ffn(self.ln2(x))  # (batch, seq, d_model)


class TransformerLM(nn.Module):
    """Decoder-only Transformer language model: token ids (batch, seq) -> logits (batch, seq, vocab_size).

    ``context_length`` is the longest sequence the model takes (RoPE tables are built for it);
    longer inputs raise ValueError. ``attention_fn`` replaces the attention of every layer (see
    the module docstring). Logits are unnormalised; use ``torch.nn.functional.cross_entropy``.
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        rope_theta: float = 10_000.0,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.token_embeddings = Embedding(vocab_size, d_model, device=device, dtype=dtype)
        rope = RotaryPositionalEmbedding(rope_theta, d_model // num_heads, context_length, device=device)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, rope, attention_fn, device=device, dtype=dtype)
            for _ in range(num_layers)
        )
        self.ln_final = RMSNorm(d_model, device=device, dtype=dtype)
        self.lm_head = Linear(d_model, vocab_size, device=device, dtype=dtype)

    def forward(self, token_ids: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab_size"]:
        seq = token_ids.shape[-1]
        if seq > self.context_length:
            raise ValueError(
                f"input has {seq} tokens but the model takes at most context_length={self.context_length}; "
                "build the model with a larger context_length or pass shorter inputs"
            )
        x = self.token_embeddings(token_ids)  # (batch, seq, d_model)
        for layer in self.layers:
            x = layer(x)  # (batch, seq, d_model)
        return self.lm_head(self.ln_final(x))  # (batch, seq, vocab_size)
