"""The truth the FlashAttention-2 tests compare against: plain attention, computed carefully.

Read by the visible tests (tests/test_flash_*.py), the hidden tests and the tolerance script.
Two versions, with the same contract as the assignment (scale 1/sqrt(d), causal masking top-left
aligned: query i sees key j iff i >= j, masked scores get -1e6 added):

- ``attention_float64`` materialises the (n_queries, n_keys) score matrix in float64. Use it
  whenever that matrix fits in memory; its own rounding error is negligible next to float32.
- ``attention_chunked`` never holds more than ``chunk`` query rows of scores at once and works
  in float32 (or float64 on request). Use it for shapes like (16, 16384, 64) on a GPU, where the
  full score matrix would not fit.

Both return the output O, the natural-log logsumexp L and, when ``dO`` is given, the gradients
dQ, dK, dV, all in the compute dtype; the tests cast the submission's results up to compare.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

MASK_BIAS = -1.0e6  # what the contract adds to masked scores


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
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool, dO: torch.Tensor | None = None
) -> AttentionResult:
    """Naive attention in float64 on Q's device: O, L and (if dO is given) dQ, dK, dV.

    Q: (batch, n_queries, d); K, V: (batch, n_keys, d); dO like Q. Any dtype: the inputs are cast
    to float64 first, so the truth is exact for the very values the submission received.
    """
    q = Q.detach().to(torch.float64).requires_grad_(dO is not None)
    k = K.detach().to(torch.float64).requires_grad_(dO is not None)
    v = V.detach().to(torch.float64).requires_grad_(dO is not None)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    with torch.enable_grad():
        s = q @ k.transpose(-1, -2) * scale  # (batch, n_queries, n_keys)
        if is_causal:
            s = s + causal_bias(Q.shape[-2], K.shape[-2], device=s.device, dtype=s.dtype)
        lse = torch.logsumexp(s, dim=-1)  # (batch, n_queries)
        o = torch.exp(s - lse[..., None]) @ v  # (batch, n_queries, d)
    if dO is None:
        return AttentionResult(o.detach(), lse.detach())
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dO.detach().to(torch.float64))
    return AttentionResult(o.detach(), lse.detach(), dq, dk, dv)


def attention_chunked(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    is_causal: bool,
    dO: torch.Tensor | None = None,
    *,
    chunk: int = 1024,
    dtype: torch.dtype = torch.float32,
) -> AttentionResult:
    """Attention computed ``chunk`` query rows at a time in ``dtype`` (float32 by default).

    Same results as ``attention_float64`` up to ``dtype`` rounding, but the largest temporary is
    (batch, chunk, n_keys) instead of (batch, n_queries, n_keys): at (16, 16384, 64) with
    chunk=1024 that is 1 GiB in float32. The gradients use the FlashAttention-2 identities
    (D = rowsum(dO * O), dS = P * (dP - D)), which are exact, not an approximation.
    """
    batch, n_queries, d = Q.shape
    n_keys = K.shape[1]
    scale = 1.0 / math.sqrt(d)
    k = K.detach().to(dtype)  # (batch, n_keys, d)
    v = V.detach().to(dtype)
    O = torch.empty(batch, n_queries, d, device=Q.device, dtype=dtype)
    L = torch.empty(batch, n_queries, device=Q.device, dtype=dtype)

    def scores(start: int, stop: int) -> torch.Tensor:
        s = Q[:, start:stop].detach().to(dtype) @ k.transpose(1, 2) * scale  # (batch, rows, n_keys)
        if is_causal:
            s += causal_bias(stop - start, n_keys, device=s.device, dtype=dtype, q_offset=start)
        return s

    for start in range(0, n_queries, chunk):
        stop = min(start + chunk, n_queries)
        s = scores(start, stop)
        L[:, start:stop] = torch.logsumexp(s, dim=-1)
        O[:, start:stop] = torch.softmax(s, dim=-1) @ v
        del s
    if dO is None:
        return AttentionResult(O, L)

    do_all = dO.detach().to(dtype)  # (batch, n_queries, d)
    D = (do_all * O).sum(dim=-1)  # (batch, n_queries)
    dQ = torch.empty_like(O)
    dK = torch.zeros(batch, n_keys, d, device=Q.device, dtype=dtype)
    dV = torch.zeros_like(dK)
    for start in range(0, n_queries, chunk):
        stop = min(start + chunk, n_queries)
        p = torch.exp(scores(start, stop) - L[:, start:stop, None])  # (batch, rows, n_keys)
        do = do_all[:, start:stop]  # (batch, rows, d)
        dV += p.transpose(1, 2) @ do
        ds = p * (do @ v.transpose(1, 2) - D[:, start:stop, None])  # (batch, rows, n_keys)
        del p
        dQ[:, start:stop] = ds @ k * scale
        dK += ds.transpose(1, 2) @ Q[:, start:stop].detach().to(dtype) * scale
        del ds
    return AttentionResult(O, L, dQ, dK, dV)
