"""The truth every FlashAttention-2 check compares against: plain attention in float64.

Read by the visible tests (tests/test_flash_*.py), the hidden tests, the tolerance script and
the leaderboard's correctness gate (in its worker, and again in its parent).
One implementation, ``attention_float64``, with the contract of the assignment: scale
1/sqrt(d), causal masking top-left aligned (query i sees key j iff i >= j), masked scores get
-1e6 added.

It works ``chunk`` query rows at a time. Softmax is row-wise, so chunking over queries is exact;
it only bounds memory: the largest temporaries are (batch, chunk, n_keys) float64 tensors, about
four of them at once with dO. At the leaderboard's shape (16, 16384, 64) one is 1 GiB with the
default chunk of 512, where the whole score matrix would be 32 GiB. The tests' shapes
(n_queries <= 2049) take one to five chunks. Everything is float64 on Q's device, whatever the
inputs' dtype, so the truth is exact for the very values the submission received, and no TF32
setting a submission may have switched on reaches it (TF32 applies to float32 only).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

MASK_BIAS = -1.0e6  # what the contract adds to masked scores
QUERY_CHUNK = 512  # query rows per chunk: (16, 512, 16384) float64 scores are 1 GiB


class AttentionResult(NamedTuple):
    """O (batch, n_queries, d), L (batch, n_queries), and the gradients, or None without dO."""

    O: torch.Tensor
    L: torch.Tensor
    dQ: torch.Tensor | None = None
    dK: torch.Tensor | None = None
    dV: torch.Tensor | None = None


def causal_bias(n_queries: int, n_keys: int, *, device, dtype, q_offset: int = 0) -> torch.Tensor:
    """(n_queries, n_keys) bias: 0 where query q_offset+i may see key j (q_offset+i >= j), else -1e6."""
    q_idx = torch.arange(q_offset, q_offset + n_queries, device=device)[:, None]
    k_idx = torch.arange(n_keys, device=device)[None, :]
    zero = torch.zeros((), device=device, dtype=dtype)
    return torch.where(q_idx >= k_idx, zero, zero + MASK_BIAS)  # (n_queries, n_keys)


def attention_float64(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    is_causal: bool,
    dO: torch.Tensor | None = None,
    *,
    chunk: int = QUERY_CHUNK,
) -> AttentionResult:
    """Attention in float64 on Q's device: O, the natural-log logsumexp L and (if dO is given)
    dQ, dK, dV by autograd, all float64.

    Q, dO: (batch, n_queries, d); K, V: (batch, n_keys, d); any dtype, any strides. Computed
    ``chunk`` query rows at a time (see the module docstring for the memory this takes).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of query rows; got {chunk}")
    batch, n_queries, d = Q.shape
    n_keys = K.shape[1]
    scale = 1.0 / math.sqrt(d)
    grad = dO is not None
    k = K.detach().to(torch.float64).requires_grad_(grad)  # (batch, n_keys, d)
    v = V.detach().to(torch.float64).requires_grad_(grad)
    O = torch.empty(batch, n_queries, d, device=Q.device, dtype=torch.float64)
    L = torch.empty(batch, n_queries, device=Q.device, dtype=torch.float64)
    dQ = torch.empty_like(O) if grad else None
    dK = torch.zeros_like(k) if grad else None
    dV = torch.zeros_like(v) if grad else None
    with torch.set_grad_enabled(grad):
        for start in range(0, n_queries, chunk):
            rows = slice(start, min(start + chunk, n_queries))
            q = Q[:, rows].detach().to(torch.float64).requires_grad_(grad)  # (batch, rows, d)
            s = q @ k.transpose(1, 2) * scale  # (batch, rows, n_keys)
            if is_causal:
                s = s + causal_bias(q.shape[1], n_keys, device=s.device, dtype=s.dtype, q_offset=start)
            L[:, rows] = torch.logsumexp(s.detach(), dim=-1)
            o = torch.softmax(s, dim=-1) @ v  # (batch, rows, d)
            O[:, rows] = o.detach()
            del s
            if grad:
                dq, dk, dv = torch.autograd.grad(o, (q, k, v), dO[:, rows].detach().to(torch.float64))
                dQ[:, rows] = dq
                dK += dk
                dV += dv
            del o, q
    return AttentionResult(O, L, dQ, dK, dV)
