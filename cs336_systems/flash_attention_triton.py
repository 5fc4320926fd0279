"""FlashAttention-2 in Triton (§2.4 forward, §2.5 backward): your implementation.

Start from your ``flash_attention_pytorch.py``: each program of the forward kernel runs that
file's inner loop for one query tile of one batch element. Keep the usual file order:
``@triton.jit`` kernels, then the Python launchers that pick tile sizes and the grid, then the
``autograd.Function``.

The contract is the PyTorch version's (read its docstring): L is the float32 natural-log
logsumexp; with ``is_causal`` query i sees key j when j <= i, and masked scores get -1e6.

Hints:
* Keep the running max, sum and accumulator in float32; cast P to V's dtype before ``P @ V``.
* Guard ragged tiles: when n_queries or n_keys is not a multiple of the tile size, load with
  ``mask=...`` and ``other=0``, give padding keys a score of -inf, and store with a mask.
* Under Triton's interpreter (TRITON_INTERPRET=1, how the tests run on a CPU) ``tl.dot`` on
  bfloat16 gives wrong answers in triton 3.6: upcast dot operands to float32 there
  (``UPCAST_DOTS``). On a GPU, ``tl.dot`` of float32 inputs uses tf32 unless you ask for
  ``input_precision="ieee"`` (``IEEE_DOTS``).
* Under ``torch.compile`` (the leaderboard) a Python float argument such as ``scale`` arrives as
  float64: ``scale = tl.cast(scale, tl.float32)`` first, or scores and accumulator turn float64.
* Backward (§2.5): recompute P from L; avoid atomics by giving dK/dV and dQ separate kernels
  (one program per key tile, looping over query tiles; one per query tile, looping over keys).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cs336_systems._not_implemented import not_implemented
from cs336_systems.flash_attention_inputs import check_flash_attention_inputs  # noqa: F401  (provided)


@triton.jit
def flash_fwd_kernel(
    Q_ptr, K_ptr, V_ptr, O_ptr, L_ptr,
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_ob, stride_oq, stride_od,
    stride_lb, stride_lq,
    N_QUERIES, N_KEYS,
    scale,
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IEEE_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
):
    """A suggested starting point: one program per (query tile, batch element).

    Launch on the grid ``(triton.cdiv(N_QUERIES, Q_TILE_SIZE), batch)``. Steps:
    1. ``tl.program_id(0)`` is the query tile, ``tl.program_id(1)`` the batch index; build the
       offsets of this tile's rows and load its Q tile (masked at the end of the sequence).
    2. Initialise the running max (-inf), running sum (0) and accumulator (0), in float32.
    3. Loop over key tiles (for causal, stop after the tile holding this tile's last query):
       S = Q K^T * scale; mask (causal -1e6, padding keys -inf); update max, sum, accumulator.
    4. Write O = acc / l in O's dtype and L = m + log(l) in float32 (masked stores).
    """
    # Your kernel here.
    pass


class FlashAttentionTriton(torch.autograd.Function):
    """FlashAttention-2 with Triton kernels for the forward (§2.4) and backward (§2.5).

    ``FlashAttentionTriton.apply(Q, K, V, is_causal=False)``:

    * Q is (batch, n_queries, d); K and V are (batch, n_keys, d); any n_queries, n_keys >= 1;
      d in {16, 32, 64, 128}; float32, float16 or bfloat16; any strides; CUDA tensors (or CPU
      tensors under TRITON_INTERPRET=1).
    * Returns O with Q's shape and dtype.
    * Saves ``ctx.save_for_backward(L, Q, K, V, O)``; L (batch, n_queries) float32 is the only
      saved tensor of that shape, and none has n_queries x n_keys elements.
    * Bad input raises TypeError or ValueError: call the provided
      ``check_flash_attention_inputs(Q, K, V, is_causal, needs_triton=True)`` first.
    * Must also work as ``torch.compile(FlashAttentionTriton.apply)``, which is how the
      leaderboard calls it.
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        """Launch ``flash_fwd_kernel``, save (L, Q, K, V, O) and ``is_causal`` on ctx, return O."""
        raise not_implemented(__file__, "FlashAttentionTriton.forward", "§2.4 flash_forward_triton")

    @staticmethod
    def backward(ctx, dO):
        """Return (dQ, dK, dV, None), computed by Triton kernels from the saved L."""
        raise not_implemented(__file__, "FlashAttentionTriton.backward", "§2.5 flash_backward")
