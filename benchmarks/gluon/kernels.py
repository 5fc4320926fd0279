"""The Gluon kernels of benchmarks/gluon/minimal_kernel.py: one per piece of a warp-specialised
FlashAttention-2 backward (that module's docstring lists them), plus the layout helper and the
TMA reduce-add ``@builtin`` they share. Staff study for issue 42; read with minimal_kernel.py,
which builds, launches and checks each one.
"""

from __future__ import annotations

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
