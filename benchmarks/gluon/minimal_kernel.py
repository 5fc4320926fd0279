"""Can Gluon (triton 3.6) on sm_90 express each piece of a warp-specialised FlashAttention-2 backward?

Issue 42's first device run. Staff study, read by whoever writes the Gluon backward next
(benchmarks/gluon/README.md has the design these pieces stand for). Each *piece* is the smallest
Gluon kernel that exercises one thing that backward needs; ``main()`` runs every piece on the GPU,
compares it with PyTorch, and prints one line per piece:

    PASS   the numbers match
    FAIL   it compiled and ran, the numbers are wrong (the mismatch report follows)
    ERROR  it raised: compile errors say what Gluon 3.6 refused (the exception follows)

One piece's failure never stops the others, so one run says which pieces work.

    python -m benchmarks.gluon.minimal_kernel                      # on an H100/H200; exit 0 iff all pass
    python -m benchmarks.gluon.minimal_kernel --only ws_loader_mma  # some pieces
    python -m benchmarks.gluon.minimal_kernel --offline            # no GPU: compile for sm_90a, ptxas -v

``--offline`` compiles each piece's kernel for sm_90a (TTGIR -> PTX -> ptxas), so front-end and
code-generation errors show on a machine without a GPU; only the device run says whether the numbers
are right and whether the warp-specialised kernels deadlock.

The pieces, simplest first (every tile is 64 x 64, bf16 in, fp32 accumulators, 4 warps = one warpgroup):

===================== ===============================================================================
tma_copy              TMA load of a tile into shared memory, completion on an mbarrier, TMA store
wgmma_ss              C = A B, both operands from shared memory (the shape of every backward product)
wgmma_b_transposed    S = Q K^T: B is a permuted view of K's tile (also dP = dO V^T)
wgmma_a_transposed    dV = P^T dO: A is a permuted view of P's tile (also dK = dS^T Q)
wgmma_a_in_registers  dQ = dS K: A comes from registers (dS is computed there)
one_tile_backward     the 5 products and the softmax recomputation of one (query tile, key tile) pair
ws_loader_mma         gl.warp_specialize: a 1-warp TMA loader feeds a 2-slot ring to the MMA warpgroup
ws_two_mma_warpgroups a loader and two MMA warpgroups (default partition + a 4-warp worker), FA3's shape
tma_reduce_add        fp32 TMA reduce-add of a tile into global memory (how FA3 accumulates dQ)
atomic_add            gl.atomic_add of a tile into global memory (the other way to accumulate dQ)
===================== ===============================================================================

``tma_reduce_add`` calls a builder method that the 3.6 wheel has (``create_async_tma_reduce``) but
that Gluon's Python API does not wrap (``hopper/tma.py``'s ``__all__`` lists only the copies and
``store_wait``): the small ``@builtin`` below wraps it. If it fails, dQ goes through atomics or a
separate dQ pass (README.md).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

TILE = 64  # every tile here is TILE x TILE: one wgmma warpgroup (4 warps x 16 rows) covers 64 rows


# ----------------------------------------------------------------------------------------------
# Layouts and one builtin
# ----------------------------------------------------------------------------------------------


@gluon.constexpr_function
def wgmma_layout(M, N, num_warps):
    """The register layout of a [M, N] wgmma accumulator computed by ``num_warps`` warps.

    A wgmma instruction gives each warp 16 rows; the warps stack along M (warps_per_cta [w, 1]),
    so M must be a multiple of 16 * num_warps. The instruction's n is the whole tile width
    (at most 256, a multiple of 8), and its k is 16 for 16-bit inputs (256 bits / 16).
    """
    if M % (16 * num_warps) != 0:
        raise ValueError(f"wgmma tile of {M} rows cannot be split over {num_warps} warps of 16 rows; "
                         f"use M a multiple of {16 * num_warps}")
    if N > 256 or N % 8 != 0:
        raise ValueError(f"wgmma tile width N={N} must be a multiple of 8 and at most 256")
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, N, 16])


@builtin
def tma_reduce_add(desc, coord, src, _semantic=None):
    """global[coord : coord + block] += src (a shared-memory tile), by the TMA unit (cp.reduce.async.bulk).

    Asynchronous like a TMA store: complete it with ``tma.store_wait``. Not part of Gluon 3.6's
    Python API; the builder method is in the 3.6 wheel (see the module docstring).
    """
    from triton._C.libtriton import ir

    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, coord, src.handle)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@gluon.jit
def _store_tile(value, desc, row, col):
    """Registers -> shared memory -> global by TMA; waits for the store."""
    smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout, value)
    fence_async_shared()  # order the generic-proxy smem writes before the async-proxy (TMA) read
    tma.async_copy_shared_to_global(desc, [row, col], smem)
    tma.store_wait(pendings=0)


@gluon.jit
def tma_copy_kernel(in_desc, out_desc):
    """out[tile] = in[tile] for the tile of rows [pid * BLOCK, (pid + 1) * BLOCK)."""
    row = gl.program_id(0) * in_desc.block_type.shape[0]
    smem = gl.allocate_shared_memory(in_desc.dtype, in_desc.block_type.shape, in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    # -- the barrier's phase completes when the expected bytes have landed --
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(in_desc, [row, 0], bar, smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    tma.async_copy_shared_to_global(out_desc, [row, 0], smem)
    tma.store_wait(pendings=0)


@gluon.jit
def mma_tile_kernel(a_desc, b_desc, c_desc, TRANS_A: gl.constexpr, TRANS_B: gl.constexpr, A_IN_REGS: gl.constexpr):
    """C = op(A) op(B) for one tile, in fp32.

    A's tile is stored [M, K], or [K, M] when TRANS_A (then read through a permuted view);
    B's tile is stored [K, N], or [N, K] when TRANS_B. With A_IN_REGS, A is loaded from shared
    memory into registers first (wgmma's register-A form, as dQ = dS K uses it).
    """
    gl.static_assert(not (TRANS_A and A_IN_REGS), "this piece does not combine a transposed A with A in registers")
    a_smem = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [0, 0], bar, a_smem)
    tma.async_copy_global_to_shared(b_desc, [0, 0], bar, b_smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)

    M: gl.constexpr = c_desc.block_type.shape[0]
    N: gl.constexpr = c_desc.block_type.shape[1]
    layout: gl.constexpr = wgmma_layout(M, N, gl.num_warps())
    acc = gl.zeros([M, N], gl.float32, layout)
    if TRANS_B:
        b = b_smem.permute((1, 0))  # [N, K] tile read as [K, N]: no data moves
    else:
        b = b_smem
    if TRANS_A:
        acc = warpgroup_mma(a_smem.permute((1, 0)), b, acc, use_acc=False, is_async=True)
    elif A_IN_REGS:
        a = a_smem.load(gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2))  # k_width: 32 bits / bf16
        acc = warpgroup_mma(a, b, acc, use_acc=False, is_async=True)
    else:
        acc = warpgroup_mma(a_smem, b, acc, use_acc=False, is_async=True)
    # the accumulator is not readable until the wgmma group completes: pass it through the wait
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    _store_tile(acc, c_desc, 0, 0)


@gluon.jit
def one_tile_backward_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, L2_ptr, Delta_ptr,
                             qk_scale_log2, scale):
    """FlashAttention-2's backward for one (query tile, key tile) pair: the 5 products.

    With S = Q K^T, L2 the row log-sum-exp of S * scale in base 2, Delta = rowsum(dO * O):
        P  = exp2(S * scale * log2(e) - L2)
        dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta)
        dK = dS^T Q * scale,  dQ = dS K * scale
    P and dS go to shared memory in bf16 so that their transposes can feed wgmma (A operand, MN-major).
    """
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BK: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, v_desc.block_type.shape, v_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, do_desc.block_type.shape, do_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, q_desc.block_type.nbytes + k_desc.block_type.nbytes + v_desc.block_type.nbytes +
                    do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [0, 0], bar, q_smem)
    tma.async_copy_global_to_shared(k_desc, [0, 0], bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [0, 0], bar, v_smem)
    tma.async_copy_global_to_shared(do_desc, [0, 0], bar, do_smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)

    s_layout: gl.constexpr = wgmma_layout(BQ, BK, gl.num_warps())  # (BQ, BK) scores
    d_layout: gl.constexpr = wgmma_layout(BQ, D, gl.num_warps())  # (BQ, D) dQ
    kd_layout: gl.constexpr = wgmma_layout(BK, D, gl.num_warps())  # (BK, D) dK, dV
    rows = gl.arange(0, BQ, layout=gl.SliceLayout(1, s_layout))
    l2 = gl.expand_dims(gl.load(L2_ptr + rows), 1)  # (BQ, 1)
    delta = gl.expand_dims(gl.load(Delta_ptr + rows), 1)  # (BQ, 1)

    # -- product 1: S = Q K^T; recompute P (fp32 max and sum came from the forward, as L2) --
    s = warpgroup_mma(q_smem, k_smem.permute((1, 0)), gl.zeros([BQ, BK], gl.float32, s_layout), use_acc=False)
    p = gl.exp2(s * qk_scale_log2 - l2)  # (BQ, BK)
    # -- product 2: dP = dO V^T; dS = P * (dP - Delta) --
    dp = warpgroup_mma(do_smem, v_smem.permute((1, 0)), gl.zeros([BQ, BK], gl.float32, s_layout), use_acc=False)
    ds = p * (dp - delta)  # (BQ, BK)
    p16 = p.to(q_desc.dtype)
    ds16 = ds.to(q_desc.dtype)
    p_smem = gl.allocate_shared_memory(q_desc.dtype, [BQ, BK], q_desc.layout, p16)
    ds_smem = gl.allocate_shared_memory(q_desc.dtype, [BQ, BK], q_desc.layout, ds16)
    fence_async_shared()  # generic-proxy stores above, async-proxy (wgmma) reads below
    # -- product 3: dV = P^T dO --
    dv = warpgroup_mma(p_smem.permute((1, 0)), do_smem, gl.zeros([BK, D], gl.float32, kd_layout), use_acc=False)
    # -- product 4: dK = dS^T Q * scale --
    dk = warpgroup_mma(ds_smem.permute((1, 0)), q_smem, gl.zeros([BK, D], gl.float32, kd_layout), use_acc=False)
    # -- product 5: dQ = dS K * scale, dS straight from registers --
    ds_a = gl.convert_layout(ds16, gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2))
    dq = warpgroup_mma(ds_a, k_smem, gl.zeros([BQ, D], gl.float32, d_layout), use_acc=False)
    _store_tile(dv, dv_desc, 0, 0)
    _store_tile(dk * scale, dk_desc, 0, 0)
    _store_tile(dq * scale, dq_desc, 0, 0)


@gluon.jit
def _ring_loader(a_descs, b_desc, a_rings, b_ring, ready_bars, empty_bars, off_m, K):
    """Producer partition (1 warp): stream K-chunks of the A tiles and of B into a ring of slots.

    Slot i % NUM_SLOTS is refilled once every consumer has arrived on its empty barrier. A fresh
    mbarrier counts as having completed the phase before phase 0, so the first lap waits on
    parity 1 and passes at once.
    """
    BLOCK_K: gl.constexpr = b_desc.block_type.shape[0]
    NUM_SLOTS: gl.constexpr = b_ring.type.shape[0]
    nbytes: gl.constexpr = len(a_descs) * a_descs[0].block_type.nbytes + b_desc.block_type.nbytes
    for i in range(gl.cdiv(K, BLOCK_K)):
        slot = i % NUM_SLOTS
        lap = (i // NUM_SLOTS) & 1
        mbarrier.wait(empty_bars.index(slot), lap ^ 1)
        ready = ready_bars.index(slot)
        mbarrier.expect(ready, nbytes)
        for j in gl.static_range(len(a_descs)):
            tma.async_copy_global_to_shared(a_descs[j], [off_m + j * a_descs[j].block_type.shape[0], i * BLOCK_K],
                                            ready, a_rings[j].index(slot))
        tma.async_copy_global_to_shared(b_desc, [i * BLOCK_K, 0], ready, b_ring.index(slot))


@gluon.jit
def _ring_mma(a_ring, b_ring, ready_bars, empty_bars, c_desc, row, K):
    """Consumer partition (one warpgroup): C[row : row + M] = sum over the ring's chunks of A_chunk B_chunk.

    The wgmma must have finished reading a slot before the slot is released to the loader.
    """
    M: gl.constexpr = a_ring.type.shape[1]
    BLOCK_K: gl.constexpr = a_ring.type.shape[2]
    N: gl.constexpr = b_ring.type.shape[2]
    NUM_SLOTS: gl.constexpr = b_ring.type.shape[0]
    layout: gl.constexpr = wgmma_layout(M, N, gl.num_warps())
    acc = gl.zeros([M, N], gl.float32, layout)
    for i in range(gl.cdiv(K, BLOCK_K)):
        slot = i % NUM_SLOTS
        lap = (i // NUM_SLOTS) & 1
        mbarrier.wait(ready_bars.index(slot), lap)
        acc = warpgroup_mma(a_ring.index(slot), b_ring.index(slot), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index(slot), count=1)
    _store_tile(acc, c_desc, row, 0)


@gluon.jit
def ws_matmul_kernel(a_desc, b_desc, c_desc, K, NUM_SLOTS: gl.constexpr):
    """C = A B for one [M, N] tile, K streamed in chunks: a loader warp and the MMA warpgroup, warp-specialised."""
    M: gl.constexpr = a_desc.block_type.shape[0]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [NUM_SLOTS] + a_desc.block_type.shape, a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [NUM_SLOTS] + b_desc.block_type.shape, b_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_SLOTS, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_SLOTS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_SLOTS):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)  # one consumer
    off_m = gl.program_id(0) * M
    gl.warp_specialize([
        (_ring_mma, (a_ring, b_ring, ready_bars, empty_bars, c_desc, off_m, K)),  # default: num_warps warps
        (_ring_loader, ((a_desc, ), b_desc, (a_ring, ), b_ring, ready_bars, empty_bars, off_m, K)),
    ], [1], [24])


@gluon.jit
def ws_two_consumers_kernel(a_desc, b_desc, c_desc, K, NUM_SLOTS: gl.constexpr):
    """C = A B for a [2M, N] tile: rows [0, M) by the default partition, rows [M, 2M) by a 4-warp worker.

    Both consumers read the same B chunk, so each slot's empty barrier waits for 2 arrivals.
    """
    M: gl.constexpr = a_desc.block_type.shape[0]
    a0_ring = gl.allocate_shared_memory(a_desc.dtype, [NUM_SLOTS] + a_desc.block_type.shape, a_desc.layout)
    a1_ring = gl.allocate_shared_memory(a_desc.dtype, [NUM_SLOTS] + a_desc.block_type.shape, a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [NUM_SLOTS] + b_desc.block_type.shape, b_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_SLOTS, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_SLOTS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_SLOTS):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=2)  # two consumers
    off_m = gl.program_id(0) * 2 * M
    gl.warp_specialize([
        (_ring_mma, (a0_ring, b_ring, ready_bars, empty_bars, c_desc, off_m, K)),
        (_ring_loader, ((a_desc, a_desc), b_desc, (a0_ring, a1_ring), b_ring, ready_bars, empty_bars, off_m, K)),
        (_ring_mma, (a1_ring, b_ring, ready_bars, empty_bars, c_desc, off_m + M, K)),
    ], [1, 4], [24, 160])


@gluon.jit
def tma_reduce_add_kernel(x_desc, out_desc):
    """out[0:BLOCK, 0:BLOCK] += x[pid-th tile], by a TMA reduce from shared memory written by registers."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = x_desc.block_type.shape[1]
    gl.static_assert(BLOCK_N % 32 == 0, "the blocked layout below covers 32 columns per warp")
    x_smem = gl.allocate_shared_memory(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [gl.program_id(0) * BLOCK_M, 0], bar, x_smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    # -- through registers, as a dQ tile would come out of wgmma --
    blocked: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    vals = x_smem.load(blocked)
    src = gl.allocate_shared_memory(out_desc.dtype, out_desc.block_type.shape, out_desc.layout, vals)
    fence_async_shared()
    tma_reduce_add(out_desc, [0, 0], src)
    tma.store_wait(pendings=0)


@gluon.jit
def atomic_add_kernel(x_ptr, out_ptr, BLOCK: gl.constexpr):
    """out[0:BLOCK, 0:BLOCK] += x[pid-th tile] by gl.atomic_add (relaxed, fp32), row-major, row stride BLOCK."""
    blocked: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, blocked))
    offs = gl.expand_dims(rows, 1) * BLOCK + gl.expand_dims(cols, 0)  # (BLOCK, BLOCK)
    vals = gl.load(x_ptr + gl.program_id(0) * BLOCK * BLOCK + offs)
    gl.atomic_add(out_ptr + offs, vals, sem="relaxed")


# ----------------------------------------------------------------------------------------------
# Launch specifications: one per piece, buildable on any device (CPU for --offline)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One kernel launch: what ``kernel[grid](*args, **constexprs, num_warps=..., maxnreg=...)`` takes."""

    kernel: object  # a @gluon.jit function
    grid: tuple[int, ...]
    args: tuple  # runtime arguments in order: TensorDescriptors, tensors (pointers), ints, floats
    constexprs: dict = field(default_factory=dict)
    num_warps: int = 4
    maxnreg: int | None = None


# (name, actual, expected, atol, rtol): what a piece's check compares, after its launch ran
Comparison = tuple[str, torch.Tensor, torch.Tensor, float, float]


@dataclass(frozen=True)
class Piece:
    name: str
    stands_for: str  # which part of the backward it exercises
    build: Callable[[str], tuple[Launch, Callable[[], list[Comparison]]]]


def _nvmma(block: list[int], dtype: torch.dtype) -> gl.NVMMASharedLayout:
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(block, gl_dtype)


def _desc(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A TMA descriptor over a contiguous 2-D tensor, tiles of ``block``, the default swizzle."""
    return TensorDescriptor.from_tensor(t, block, _nvmma(block, t.dtype))


def _randn(*shape: int, device: str, dtype=torch.bfloat16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def build_tma_copy(device: str):
    x = _randn(2 * TILE, TILE, device=device)  # two tiles: the second checks program_id offsets
    out = torch.zeros_like(x)
    launch = Launch(tma_copy_kernel, (2, ), (_desc(x, [TILE, TILE]), _desc(out, [TILE, TILE])))
    return launch, lambda: [("out", out, x, 0.0, 0.0)]


def _build_mma(trans_a: bool, trans_b: bool, a_in_regs: bool):

    def build(device: str):
        a = _randn(TILE, TILE, device=device, seed=1)  # stored [K, M] if trans_a
        b = _randn(TILE, TILE, device=device, seed=2)  # stored [N, K] if trans_b
        c = torch.zeros(TILE, TILE, device=device, dtype=torch.float32)
        blk = [TILE, TILE]
        launch = Launch(mma_tile_kernel, (1, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk)),
                        dict(TRANS_A=trans_a, TRANS_B=trans_b, A_IN_REGS=a_in_regs))

        def check():
            a64, b64 = a.double(), b.double()
            expected = (a64.T if trans_a else a64) @ (b64.T if trans_b else b64)
            return [("C", c, expected, 1e-3, 1e-3)]  # exact bf16 products, fp32 sums of 64 terms

        return launch, check

    return build


def build_one_tile_backward(device: str):
    q, k, v, do = (_randn(TILE, TILE, device=device, seed=s) for s in (3, 4, 5, 6))
    scale = TILE**-0.5
    # forward statistics from float64 on the same bf16 inputs
    q64, k64, v64, do64 = (t.double().requires_grad_(True) for t in (q, k, v, do))
    s64 = q64 @ k64.T * scale  # (Nq, Nk)
    lse = torch.logsumexp(s64, dim=-1)  # (Nq,)
    o64 = torch.softmax(s64, dim=-1) @ v64  # (Nq, d)
    delta = (o64 * do64).sum(-1)  # (Nq,)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(o64, (q64, k64, v64), do64)
    l2 = (lse * 1.4426950408889634).detach().float()  # log2(e) * natural-log LSE
    delta32 = delta.detach().float()
    dq, dk, dv = (torch.zeros(TILE, TILE, device=device, dtype=torch.float32) for _ in range(3))
    blk = [TILE, TILE]
    launch = Launch(one_tile_backward_kernel, (1, ),
                    (_desc(q, blk), _desc(k, blk), _desc(v, blk), _desc(do, blk), _desc(dq, blk), _desc(dk, blk),
                     _desc(dv, blk), l2, delta32, scale * 1.4426950408889634, scale))
    # P and dS enter three of the products in bf16 (relative rounding 2^-8), as in the reference kernel
    return launch, lambda: [("dQ", dq, dq_ref, 2e-2, 2e-2), ("dK", dk, dk_ref, 2e-2, 2e-2),
                            ("dV", dv, dv_ref, 2e-2, 2e-2)]


def build_ws_loader_mma(device: str):
    k_total = 4 * TILE  # 4 chunks through 2 slots: every slot is refilled once, both barrier parities used
    a = _randn(2 * TILE, k_total, device=device, seed=7)  # two programs
    b = _randn(k_total, TILE, device=device, seed=8)
    c = torch.zeros(2 * TILE, TILE, device=device, dtype=torch.float32)
    blk = [TILE, TILE]
    # 4 MMA warps + 1 loader warp (its warpgroup rounded up to 4): 8 warps x 32 x 128 regs = half the file
    launch = Launch(ws_matmul_kernel, (2, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk), k_total), dict(NUM_SLOTS=2),
                    num_warps=4, maxnreg=128)
    return launch, lambda: [("C", c, a.double() @ b.double(), 1e-2, 1e-3)]


def build_ws_two_mma_warpgroups(device: str):
    k_total = 4 * TILE
    a = _randn(2 * TILE, k_total, device=device, seed=9)  # one program, two 64-row halves
    b = _randn(k_total, TILE, device=device, seed=10)
    c = torch.zeros(2 * TILE, TILE, device=device, dtype=torch.float32)
    blk = [TILE, TILE]
    # 4 (default) + 1 (loader, rounded to 4) + 4 warps = 12 warps; 12 x 32 x 168 = 64512 <= 65536 registers
    launch = Launch(ws_two_consumers_kernel, (1, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk), k_total),
                    dict(NUM_SLOTS=2), num_warps=4, maxnreg=168)
    return launch, lambda: [("C", c, a.double() @ b.double(), 1e-2, 1e-3)]


def build_tma_reduce_add(device: str):
    x = _randn(2 * TILE, TILE, device=device, dtype=torch.float32, seed=11)
    base = _randn(TILE, TILE, device=device, dtype=torch.float32, seed=12)
    out = base.clone()
    launch = Launch(tma_reduce_add_kernel, (2, ), (_desc(x, [TILE, TILE]), _desc(out, [TILE, TILE])))
    return launch, lambda: [("out", out, base.double() + x[:TILE].double() + x[TILE:].double(), 1e-5, 1e-5)]


def build_atomic_add(device: str):
    x = _randn(2 * TILE, TILE, device=device, dtype=torch.float32, seed=13)
    base = _randn(TILE, TILE, device=device, dtype=torch.float32, seed=14)
    out = base.clone()
    launch = Launch(atomic_add_kernel, (2, ), (x, out), dict(BLOCK=TILE))
    return launch, lambda: [("out", out, base.double() + x[:TILE].double() + x[TILE:].double(), 1e-5, 1e-5)]


PIECES = (
    Piece("tma_copy", "every Q/K/V/dO tile load (TMA + mbarrier) and the dK/dV stores", build_tma_copy),
    Piece("wgmma_ss", "a product with both operands in shared memory", _build_mma(False, False, False)),
    Piece("wgmma_b_transposed", "S = Q K^T and dP = dO V^T", _build_mma(False, True, False)),
    Piece("wgmma_a_transposed", "dV = P^T dO and dK = dS^T Q", _build_mma(True, False, False)),
    Piece("wgmma_a_in_registers", "dQ = dS K with dS in registers", _build_mma(False, False, True)),
    Piece("one_tile_backward", "the 5 products and the recomputation of P, one tile pair", build_one_tile_backward),
    Piece("ws_loader_mma", "producer warp + MMA warpgroup, mbarrier ring (gl.warp_specialize)", build_ws_loader_mma),
    Piece("ws_two_mma_warpgroups", "producer + two consumer warpgroups (FA3's 3 warpgroups)",
          build_ws_two_mma_warpgroups),
    Piece("tma_reduce_add", "dQ accumulated by TMA reduce-add (unwrapped builder method)", build_tma_reduce_add),
    Piece("atomic_add", "dQ accumulated by gl.atomic_add", build_atomic_add),
)


# ----------------------------------------------------------------------------------------------
# Running: on the GPU, or compiled offline for sm_90a
# ----------------------------------------------------------------------------------------------


def run_piece(piece: Piece) -> tuple[str, str]:
    """Launch one piece on the GPU and judge it: ("PASS" | "FAIL" | "ERROR", detail)."""
    from harness.assertions import assert_close  # the kit's one assertion helper

    try:
        launch, check = piece.build("cuda")
        launch.kernel[launch.grid](*launch.args, **launch.constexprs, num_warps=launch.num_warps,
                                   maxnreg=launch.maxnreg)
        torch.cuda.synchronize()
    except Exception as exc:  # a compile error, a launch error, or a fault caught at the synchronize
        return "ERROR", _describe(exc)
    problems = []
    for what, actual, expected, atol, rtol in check():
        try:
            assert_close(actual, expected, atol=atol, rtol=rtol, what=what, context=piece.name)
        except AssertionError as exc:
            problems.append(str(exc))
    return ("FAIL", "\n".join(problems)) if problems else ("PASS", "")


def compile_offline(piece: Piece) -> tuple[str, str]:
    """Compile one piece's kernel for sm_90a without a GPU; run ptxas -v on its PTX.

    Returns ("COMPILED", ptxas's register line) or ("ERROR", the exception).
    """
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    try:
        launch, _ = piece.build("cpu")
        fn = launch.kernel
        signature, constexprs, attrs = {}, {}, {}
        runtime = iter(launch.args)
        for index, name in enumerate(fn.arg_names):
            if fn.params[index].is_constexpr:
                signature[name] = "constexpr"
                constexprs[name] = launch.constexprs.get(name, fn.params[index].default)
                continue
            arg = next(runtime)
            signature[name] = mangle_type(arg)
            if isinstance(arg, torch.Tensor):
                attrs[(index, )] = [["tt.divisibility", 16]]  # as a launch with aligned tensors specialises it
        options = {"num_warps": launch.num_warps}
        if launch.maxnreg is not None:
            options["maxnreg"] = launch.maxnreg
        compiled = triton.compile(GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        with tempfile.TemporaryDirectory() as tmp:
            ptx = Path(tmp) / "kernel.ptx"
            ptx.write_text(compiled.asm["ptx"])
            done = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(ptx), "-o",
                                   str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True)
        info = done.stdout + done.stderr
        if done.returncode != 0:
            return "ERROR", "ptxas: " + info.strip()
        used = re.search(r"Used \d+ registers[^\n]*", info)
        ptx_text = compiled.asm["ptx"]
        marks = [m for m in ("wgmma.mma_async", "cp.async.bulk.tensor", "cp.reduce.async.bulk", "setmaxnreg",
                             "mbarrier.try_wait", "red.global", "atom.global") if m in ptx_text]
        return "COMPILED", (used.group(0) if used else "ptxas: no register line") + "; PTX has " + ", ".join(marks)
    except Exception as exc:
        return "ERROR", _describe(exc)


def _describe(exc: BaseException) -> str:
    """The exception's type and message, and the last frames: enough to tell a refusal from a bug."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in frames)
    return f"{text}\n    at {where}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[p.name for p in PIECES], help="run these pieces only")
    parser.add_argument("--offline", action="store_true", help="no GPU: compile each piece for sm_90a")
    args = parser.parse_args(argv)
    pieces = [p for p in PIECES if args.only is None or p.name in args.only]

    if not args.offline:
        if not torch.cuda.is_available():
            print("minimal_kernel: no CUDA device. These pieces need an sm_90 GPU (H100/H200) to run; "
                  "without one, `--offline` compiles them for sm_90a instead.", file=sys.stderr)
            return 2
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            print(f"minimal_kernel: this GPU is sm_{major}{minor}; the pieces use Hopper-only instructions "
                  "(wgmma, setmaxnreg) and are meant for sm_90.", file=sys.stderr)
            return 2
        print(f"device: {torch.cuda.get_device_name()} (sm_{major}{minor}); torch {torch.__version__}, "
              f"triton {triton.__version__}")
    else:
        print(f"offline: compiling for sm_90a; torch {torch.__version__}, triton {triton.__version__}")

    verdicts = []
    for piece in pieces:
        verdict, detail = compile_offline(piece) if args.offline else run_piece(piece)
        verdicts.append(verdict)
        print(f"{verdict:<8} {piece.name:<22} {piece.stands_for}", flush=True)
        if detail:
            print("    " + detail.replace("\n", "\n    "), flush=True)
    good = "COMPILED" if args.offline else "PASS"
    print(f"{sum(v == good for v in verdicts)} of {len(verdicts)} pieces {good}")
    return 0 if all(v == good for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
