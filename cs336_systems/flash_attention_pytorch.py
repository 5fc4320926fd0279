"""FlashAttention-2 in plain PyTorch (§2.3 forward, §2.5 backward): your implementation.

Write this before the Triton version: the loops you write here are the ones each Triton
program will run for one query tile. Naive attention writes the whole (n_queries, n_keys)
score matrix to memory; FlashAttention-2 never does. It walks over key tiles and keeps, for
each query row, a running maximum ``m``, a running softmax denominator ``l`` and an
unnormalised output ``acc`` (the "online softmax"); when a tile raises the maximum, the old
``l`` and ``acc`` are rescaled by ``exp(m_old - m_new)``. At the end ``O = acc / l``, and the
logsumexp ``L = m + log(l)`` is saved so that the backward can rebuild ``P = exp(S - L)``.

The truth your output is compared with is naive attention:
``S = Q K^T / sqrt(d)``; if ``is_causal``, add -1e6 to ``S[i, j]`` wherever ``j > i``
(top-left aligned, indices from 0, also when n_queries != n_keys); ``P = softmax(S)``;
``O = P V``. Query i always sees key 0, so no row is ever fully masked. Masked entries get a
probability of exactly 0 in float32, so a key tile wholly above the diagonal can be skipped.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented
from cs336_systems.flash_attention_inputs import check_flash_attention_inputs  # noqa: F401  (provided)

Q_TILE_SIZE = 64  # query rows per tile: any size >= 16 works
K_TILE_SIZE = 64  # key rows per tile: any size >= 16 works
MASK_VALUE = -1e6  # added to masked scores, as in the naive reference (not -inf)


def flash_forward_pytorch(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    is_causal: bool = False,
    q_tile_size: int = Q_TILE_SIZE,
    k_tile_size: int = K_TILE_SIZE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention forward with an online softmax (a suggested helper for ``forward``).

    Args:
        Q: (batch, n_queries, d); K, V: (batch, n_keys, d); one dtype, one device.
        is_causal: mask key j for query i when j > i.
        q_tile_size, k_tile_size: tile sizes in rows. Loop over query tiles, and inside over key
            tiles; never build a (n_queries, n_keys) tensor. Do the math in float32 and handle
            the last, shorter tile when n_queries or n_keys is not a multiple of the tile size.

    Returns:
        O: (batch, n_queries, d) in Q's dtype.
        L: (batch, n_queries) float32 natural-log logsumexp of each row of scaled, masked scores.
    """
    raise not_implemented(__file__, "flash_forward_pytorch", "§2.3 flash_forward_pytorch")


def flash_backward_pytorch(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    O: torch.Tensor,
    dO: torch.Tensor,
    L: torch.Tensor,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention backward from the saved logsumexp (a suggested helper for ``backward``).

    With ``S`` the scaled, masked scores: ``D = rowsum(O * dO)``, ``P = exp(S - L)``,
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)``, ``dQ = dS K / sqrt(d)``,
    ``dK = dS^T Q / sqrt(d)``. Here you may build the (n_queries, n_keys) matrices: on a GPU,
    wrap this function in ``torch.compile`` so that they are fused; on a CPU call it plain
    (compiling C++ there makes each new test shape take tens of seconds). Returns dQ, dK, dV
    with the shapes of Q, K, V. ``dO`` may have any strides (``o.sum().backward()`` passes an
    expanded tensor whose strides are all 0).
    """
    raise not_implemented(__file__, "flash_backward_pytorch", "§2.5 flash_backward")


class FlashAttentionPytorch(torch.autograd.Function):
    """FlashAttention-2 with a tiled PyTorch forward and a (compiled) PyTorch backward.

    ``FlashAttentionPytorch.apply(Q, K, V, is_causal=False)``:

    * Q is (batch, n_queries, d); K and V are (batch, n_keys, d); any n_queries, n_keys >= 1
      (not only multiples of the tile size, and n_queries may differ from n_keys);
      d in {16, 32, 64, 128}; float32, float16 or bfloat16; any strides.
    * Returns O with Q's shape and dtype.
    * Saves for the backward ``ctx.save_for_backward(L, Q, K, V, O)``, where L is the
      (batch, n_queries) float32 natural-log logsumexp: the only saved tensor of that shape.
      No saved tensor may have n_queries x n_keys elements.
    * Bad input (wrong rank, mismatched shapes, dtypes or devices, unsupported d, a non-bool
      ``is_causal``) raises TypeError or ValueError: call the provided
      ``check_flash_attention_inputs(Q, K, V, is_causal)`` first.
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        """Compute O tile by tile, save (L, Q, K, V, O) and ``is_causal`` on ctx, return O."""
        raise not_implemented(__file__, "FlashAttentionPytorch.forward", "§2.3 flash_forward_pytorch")

    @staticmethod
    def backward(ctx, dO):
        """Return (dQ, dK, dV, None): gradients in the dtypes of Q, K, V, and None for is_causal."""
        raise not_implemented(__file__, "FlashAttentionPytorch.backward", "§2.5 flash_backward")
