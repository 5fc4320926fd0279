"""Gluon kernels of a FlashAttention-2 backward for sm_90 (H100/H200): issue 42's staff backward.

Host code, variants and the autograd Function are in ``backward.py``; the design is README.md's
"Design of the backward". Every kernel works on 2-D views: Q, dO, O as (B * NQ, D), K, V as
(B * NK, D), row statistics as (B * NQ,), dQ's fp32 accumulator as (B * NQ, D).

Notation (keys as rows): for a key block K_w [BK, D] and a query tile Q_i [BQ, D],

    S^T  = K_w Q_i^T                      P^T = exp2(S^T * scale * log2 e - L2_i[None, :])
    dP^T = V_w dO_i^T                     dS^T = P^T * (dP^T - Delta_i[None, :])
    dV_w += P^T dO_i      dK_w += dS^T Q_i      dQ_i += (dS^T)^T K_w

L2 = L * log2 e (L the forward's natural-log logsumexp), Delta = rowsum(dO * O). dK and dQ are
scaled by ``scale`` once, at the end (dK in the kernel's epilogue, dQ in the cast kernel).

Ragged n: a 2-D TMA box that runs past a batch element's last row reads the next element's rows
(or zeros past the tensor's end). Those rows only enter through P^T, which is zeroed for every
key >= NK and every query >= NQ, so they contribute exact zeros: to dK/dV rows that are never
stored (the dK/dV epilogue stores with a row mask, not by TMA), and as +0.0 to dQ rows of the
next element (harmless in a reduce-add).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from benchmarks.gluon.kernels import tma_reduce_add, wgmma_layout

LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)


# ----------------------------------------------------------------------------------------------
# Pre- and post-passes (plain pointer kernels, blocked layouts)
# ----------------------------------------------------------------------------------------------


@gluon.jit
def bwd_prepass_kernel(o_ptr, do_ptr, l_ptr, l2_ptr, delta_ptr, dq32_ptr, ROWS, D: gl.constexpr,
                       BLOCK: gl.constexpr):
    """For rows [pid * BLOCK, pid * BLOCK + BLOCK) of the (ROWS, D) views of O and dO:
    Delta = rowsum(O * dO) (fp32), L2 = L * log2 e, and dQ's fp32 accumulator rows set to 0."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    in_rows = rows < ROWS
    offs = gl.expand_dims(rows.to(gl.int64) * D, 1) + gl.expand_dims(cols, 0)  # (BLOCK, D)
    mask = gl.expand_dims(in_rows, 1)
    o = gl.load(o_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    do = gl.load(do_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    gl.store(delta_ptr + rows, gl.sum(o * do, axis=1), mask=in_rows)
    gl.store(l2_ptr + rows, gl.load(l_ptr + rows, mask=in_rows, other=0.0) * LOG2E, mask=in_rows)
    gl.store(dq32_ptr + offs, gl.zeros([BLOCK, D], gl.float32, layout), mask=mask)


@gluon.jit
def bwd_dq_cast_kernel(dq32_ptr, dq_ptr, ROWS, scale, D: gl.constexpr, BLOCK: gl.constexpr):
    """dQ = (scale * dQ32).to(dQ's dtype) for rows [pid * BLOCK, pid * BLOCK + BLOCK) of (ROWS, D)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows.to(gl.int64) * D, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < ROWS, 1)
    dq = gl.load(dq32_ptr + offs, mask=mask, other=0.0) * scale
    gl.store(dq_ptr + offs, dq.to(dq_ptr.dtype.element_ty), mask=mask)


# ----------------------------------------------------------------------------------------------
# The five products of one (key block, query tile) pair, for one warpgroup
# ----------------------------------------------------------------------------------------------


@gluon.jit
def _row_stats(l2_ptr, delta_ptr, row0q, q0, NQ, BQ: gl.constexpr, s_layout: gl.constexpr):
    """(L2, Delta) of queries [q0, q0 + BQ) as [1, BQ] tensors in ``s_layout``; 0 for queries >= NQ."""
    cols = q0 + gl.arange(0, BQ, layout=gl.SliceLayout(0, s_layout))
    ok = cols < NQ
    l2 = gl.load(l2_ptr + row0q + cols, mask=ok, other=0.0)
    delta = gl.load(delta_ptr + row0q + cols, mask=ok, other=0.0)
    return gl.expand_dims(l2, 0), gl.expand_dims(delta, 0)


@gluon.jit
def _visible(p_t, kw0, q0, NQ, NK, IS_CAUSAL: gl.constexpr):
    """P^T with 0 where key kw0 + r may not be seen by query q0 + c: key past NK, query past NQ,
    or (causal) key > query. Only called on tiles that need it (see ``_pair_products``)."""
    BK: gl.constexpr = p_t.shape[0]
    BQ: gl.constexpr = p_t.shape[1]
    layout: gl.constexpr = p_t.type.layout
    keys = gl.expand_dims(kw0 + gl.arange(0, BK, layout=gl.SliceLayout(1, layout)), 1)  # (BK, 1)
    queries = gl.expand_dims(q0 + gl.arange(0, BQ, layout=gl.SliceLayout(0, layout)), 0)  # (1, BQ)
    ok = (keys < NK) & (queries < NQ)
    if IS_CAUSAL:
        ok = ok & (keys <= queries)
    return gl.where(ok, p_t, 0.0)


@gluon.jit
def _pair_products(k_smem, v_smem, q_tile, do_tile, ds_smem, l2, delta, dk, dv, kw0, q0, NQ, NK,
                   qk_scale_log2, IS_CAUSAL: gl.constexpr):
    """The five products of one (key block [BK, D], query tile [BQ, D]) pair, by one warpgroup.

    Returns (dK_w + dS^T Q_i, dV_w + P^T dO_i, dS K_w) with dK and dQ unscaled. On return every
    wgmma of the pair has completed: the caller may release q_tile/do_tile and rewrite ds_smem.
    ds_smem [BK, BQ] must not be read by an outstanding wgmma on entry (it is not: see above).
    """
    BK: gl.constexpr = k_smem.type.shape[0]
    D: gl.constexpr = k_smem.type.shape[1]
    BQ: gl.constexpr = q_tile.type.shape[0]
    s_layout: gl.constexpr = wgmma_layout(BK, BQ, gl.num_warps())  # S^T, dP^T, P^T, dS^T
    kd_layout: gl.constexpr = wgmma_layout(BK, D, gl.num_warps())  # dK, dV
    dq_layout: gl.constexpr = wgmma_layout(BQ, D, gl.num_warps())  # dQ partial
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kd_layout, k_width=2)

    # -- products 1 and 2, both in flight; S^T is consumed while dP^T runs --
    zero_s = gl.zeros([BK, BQ], gl.float32, s_layout)
    s_t = warpgroup_mma(k_smem, q_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dp_t = warpgroup_mma(v_smem, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t, ))
    p_t = gl.exp2(s_t * qk_scale_log2 - l2)  # (BK, BQ)
    # tiles that run past NQ / NK or (causal) cross the diagonal need the mask; the rest skip it
    ragged = (q0 + BQ > NQ) | (kw0 + BK > NK)
    if IS_CAUSAL:
        ragged = ragged | (q0 < kw0 + BK)
    if ragged:
        p_t = _visible(p_t, kw0, q0, NQ, NK, IS_CAUSAL)
    p_a = gl.convert_layout(p_t.to(q_tile.dtype), a_layout)
    # -- product 3: dV += P^T dO (A from registers) --
    dv = warpgroup_mma(p_a, do_tile, dv, is_async=True)
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t, ))  # dP^T done; dV may still run
    ds_t = (p_t * (dp_t - delta)).to(q_tile.dtype)  # (BK, BQ)
    ds_smem.store(ds_t)
    ds_a = gl.convert_layout(ds_t, a_layout)
    # -- product 4: dK += dS^T Q (A from registers) --
    dk = warpgroup_mma(ds_a, q_tile, dk, is_async=True)
    fence_async_shared()  # ds_smem: generic-proxy stores above, wgmma (async proxy) reads below
    # -- product 5: dQ_i = (dS^T)^T K_w, A = the transposed view of dS^T in shared memory --
    dq = warpgroup_mma(ds_smem.permute((1, 0)), k_smem, gl.zeros([BQ, D], gl.float32, dq_layout), use_acc=False,
                       is_async=True)
    dv, dk, dq, p_a, ds_a = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, dq, p_a, ds_a))
    return dk, dv, dq


@gluon.jit
def _add_dq(dq, dq_smem, dq_desc, dq32_ptr, row0q, q0, NQ, DQ_ATOMIC: gl.constexpr):
    """dQ32[row0q + q0 : row0q + q0 + BQ] += dq (queries >= NQ add exact zeros, see the module docstring).

    TMA reduce-add (default): staged through dq_smem; first waits for the previous reduce from
    dq_smem to finish reading it; the reduce issued here is left in flight (the caller's
    ``tma.store_wait(0)`` before exit completes it). DQ_ATOMIC: gl.atomic_add per element, rows
    of queries >= NQ masked (they may lie past the buffer's end)."""
    if DQ_ATOMIC:
        BQ: gl.constexpr = dq.shape[0]
        D: gl.constexpr = dq.shape[1]
        layout: gl.constexpr = dq.type.layout
        rows = q0 + gl.arange(0, BQ, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
        offs = gl.expand_dims((row0q + rows).to(gl.int64) * D, 1) + gl.expand_dims(cols, 0)
        gl.atomic_add(dq32_ptr + offs, dq, mask=gl.expand_dims(rows < NQ, 1), sem="relaxed")
    else:
        tma.store_wait(pendings=0)  # the last reduce has read dq_smem (the compiler adds the bar.sync after it)
        dq_smem.store(dq)
        fence_async_shared()  # generic-proxy stores, then the TMA (async proxy) read
        tma_reduce_add(dq_desc, [row0q + q0, 0], dq_smem)


@gluon.jit
def _zero_dk_dv(kv_bar, BK: gl.constexpr, D: gl.constexpr):
    """Zeroed fp32 dK, dV accumulators [BK, D] (wgmma layout of one warpgroup), once K and V have landed
    (kv_bar, phase 0)."""
    kd_layout: gl.constexpr = wgmma_layout(BK, D, gl.num_warps())
    dk = gl.zeros([BK, D], gl.float32, kd_layout)
    dv = gl.zeros([BK, D], gl.float32, kd_layout)
    mbarrier.wait(kv_bar, phase=0)
    return dk, dv


@gluon.jit
def _query_steps(k0, NQ, BQ: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """(first query row, number of BQ-row query steps) that see keys from k0 on: causal skips the query
    tiles that end before k0. n_steps <= 0 when no query sees them (causal, k0 >= NQ)."""
    if IS_CAUSAL:
        q_start = (k0 // BQ) * BQ
    else:
        q_start = 0
    return q_start, gl.cdiv(NQ - q_start, BQ)


@gluon.jit
def _store_rows(x, ptr, row0, r0, NROWS, D: gl.constexpr):
    """ptr[(row0 + r0 + r) * D + c] = x[r, c] for r0 + r < NROWS (x in its wgmma layout)."""
    R: gl.constexpr = x.shape[0]
    layout: gl.constexpr = x.type.layout
    rows = r0 + gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims((row0 + rows).to(gl.int64) * D, 1) + gl.expand_dims(cols, 0)
    gl.store(ptr + offs, x.to(ptr.dtype.element_ty), mask=gl.expand_dims(rows < NROWS, 1))


# ----------------------------------------------------------------------------------------------
# Variant "plain": one warpgroup, no warp specialisation, Q/dO prefetched one tile ahead
# ----------------------------------------------------------------------------------------------


@gluon.jit
def bwd_plain_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dq32_ptr, l2_ptr, delta_ptr, dk_ptr, dv_ptr, NQ,
                     NK, qk_scale_log2, scale, IS_CAUSAL: gl.constexpr, DQ_ATOMIC: gl.constexpr):
    """dK, dV of key tile program_id(1) of batch element program_id(0); its dQ shares reduce-added
    into dq_desc's fp32 buffer. Grid (B, cdiv(NK, BK)), batch fastest (causal: heaviest first).

    Barriers: kv_bar (K, V, once, phase 0); ready[s] (Q_i, dO_i of step i in slot s = i % 2,
    phase (i // 2) & 1). Slot s is refilled for step i + 1 during step i: step i - 1, its last
    reader, ended with warpgroup_mma_wait(0), so no wgmma reads it any more.
    """
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BK: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    b = gl.program_id(0)
    k0 = gl.program_id(1) * BK
    row0q = b * NQ
    row0k = b * NK

    k_smem = gl.allocate_shared_memory(dtype, [BK, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BK, D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [2, BQ, D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [2, BQ, D], do_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [BK, BQ], gl.NVMMASharedLayout.get_default_for([BK, BQ], dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(2):
        mbarrier.init(ready.index(s), count=1)

    # causal: query tiles ending before k0 see none of these keys
    if IS_CAUSAL:
        q_start = (k0 // BQ) * BQ
    else:
        q_start = 0
    n_steps = gl.cdiv(NQ - q_start, BQ)  # <= 0 when no query sees these keys (causal, k0 >= NQ)
    qdo_bytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0k + k0, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0k + k0, 0], kv_bar, v_smem)
    first = n_steps > 0
    mbarrier.expect(ready.index(0), qdo_bytes, pred=first)
    tma.async_copy_global_to_shared(q_desc, [row0q + q_start, 0], ready.index(0), q_ring.index(0), pred=first)
    tma.async_copy_global_to_shared(do_desc, [row0q + q_start, 0], ready.index(0), do_ring.index(0), pred=first)

    s_layout: gl.constexpr = wgmma_layout(BK, BQ, gl.num_warps())
    dk, dv = _zero_dk_dv(kv_bar, BK, D)
    for i in range(n_steps):
        q0 = q_start + i * BQ
        # prefetch step i + 1 into the other slot (its last reader, step i - 1, has completed)
        nxt = (i + 1) % 2
        more = i + 1 < n_steps
        mbarrier.expect(ready.index(nxt), qdo_bytes, pred=more)
        tma.async_copy_global_to_shared(q_desc, [row0q + q0 + BQ, 0], ready.index(nxt), q_ring.index(nxt), pred=more)
        tma.async_copy_global_to_shared(do_desc, [row0q + q0 + BQ, 0], ready.index(nxt), do_ring.index(nxt),
                                        pred=more)
        l2, delta = _row_stats(l2_ptr, delta_ptr, row0q, q0, NQ, BQ, s_layout)
        slot = i % 2
        mbarrier.wait(ready.index(slot), phase=(i // 2) & 1)
        dk, dv, dq = _pair_products(k_smem, v_smem, q_ring.index(slot), do_ring.index(slot), ds_smem, l2, delta, dk,
                                    dv, k0, q0, NQ, NK, qk_scale_log2, IS_CAUSAL)
        _add_dq(dq, dq_smem, dq_desc, dq32_ptr, row0q, q0, NQ, DQ_ATOMIC)
    tma.store_wait(pendings=0)
    mbarrier.invalidate(kv_bar)
    for s in gl.static_range(2):
        mbarrier.invalidate(ready.index(s))
    _store_rows(dk * scale, dk_ptr, row0k, k0, NK, D)
    _store_rows(dv, dv_ptr, row0k, k0, NK, D)


# ----------------------------------------------------------------------------------------------
# Variant "ws": a TMA producer warp and two consumer warpgroups (keys 0-63 and 64-127 of a tile)
# ----------------------------------------------------------------------------------------------
#
# Barrier protocol (all in shared memory, initialised before gl.warp_specialize):
#   kv_bar    count 1: the loader's expect (K, V of both halves); consumers wait phase 0, once.
#   ready[s]  count 1: the loader's expect for Q_i, dO_i in slot s = i % 2; consumers wait
#             phase (i // 2) & 1.
#   empty[s]  count 2: each consumer arrives once per step, after warpgroup_mma_wait(0) (its
#             last wgmma reading slot s has completed); the loader waits phase ((i // 2) & 1) ^ 1
#             before refilling slot s for step i (a fresh barrier passes parity 1 at once).
#   DQ_SUM only: dq_bars[0] "full", dq_bars[1] "free", count 1 each (see ``_sum_dq``).
# Each consumer owns its ds_smem; each its dq staging tile, except that with DQ_SUM consumer 1
# hands its dQ partial to consumer 0 through its tile.


@gluon.jit
def _ws_loader(q_desc, k_desc, v_desc, do_desc, k_smems, v_smems, q_ring, do_ring, kv_bar, ready, empty, row0q,
               row0k, k0, q_start, n_steps):
    """Producer partition (1 warp): K, V of the key tile (two halves) once, then Q_i, dO_i per step."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    mbarrier.expect(kv_bar, 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    for h in gl.static_range(2):
        tma.async_copy_global_to_shared(k_desc, [row0k + k0 + h * BKW, 0], kv_bar, k_smems[h])
        tma.async_copy_global_to_shared(v_desc, [row0k + k0 + h * BKW, 0], kv_bar, v_smems[h])
    nbytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes
    for i in range(n_steps):
        slot = i % 2
        mbarrier.wait(empty.index(slot), ((i // 2) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(q_desc, [row0q + q_start + i * BQ, 0], bar, q_ring.index(slot))
        tma.async_copy_global_to_shared(do_desc, [row0q + q_start + i * BQ, 0], bar, do_ring.index(slot))


@gluon.jit
def _sum_dq(dq, dq_pair, dq_bars, i, ROLE: gl.constexpr, dq_desc, row):
    """DQ_SUM: consumer 1 hands its dQ partial to consumer 0 through dq_pair[1]; consumer 0 adds it to
    its own and issues the one TMA reduce-add of the pair (half the reduce traffic of one per consumer).

    dq_bars[0] "full" (count 1): consumer 1 arrives after storing step i's partial; consumer 0 waits
    parity i & 1. dq_bars[1] "free" (count 1): consumer 0 arrives once it has loaded the partial;
    consumer 1 waits parity (i & 1) ^ 1 before overwriting it (a fresh barrier passes step 0)."""
    if ROLE == 1:
        mbarrier.wait(dq_bars.index(1), (i & 1) ^ 1)
        dq_pair[1].store(dq)
        mbarrier.arrive(dq_bars.index(0), count=1)
    else:
        mbarrier.wait(dq_bars.index(0), i & 1)
        dq = dq + dq_pair[1].load(dq.type.layout)
        mbarrier.arrive(dq_bars.index(1), count=1)
        tma.store_wait(pendings=0)  # the last reduce has read dq_pair[0]
        dq_pair[0].store(dq)
        fence_async_shared()
        tma_reduce_add(dq_desc, [row, 0], dq_pair[0])


@gluon.jit
def _ws_consumer(k_smem, v_smem, q_ring, do_ring, ds_smem, dq_pair, dq_bars, kv_bar, ready, empty, dq_desc, dq32_ptr,
                 l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, kw0, q_start, n_steps, NQ, NK, qk_scale_log2,
                 scale, IS_CAUSAL: gl.constexpr, DQ_ATOMIC: gl.constexpr, DQ_SUM: gl.constexpr, ROLE: gl.constexpr):
    """Consumer partition ROLE (one warpgroup): dK, dV of keys [kw0, kw0 + 64); its dQ shares added by
    ``_add_dq`` from dq_pair[ROLE], or (DQ_SUM) summed with the other consumer's by ``_sum_dq``."""
    BKW: gl.constexpr = k_smem.type.shape[0]
    D: gl.constexpr = k_smem.type.shape[1]
    BQ: gl.constexpr = q_ring.type.shape[1]
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    dk, dv = _zero_dk_dv(kv_bar, BKW, D)
    for i in range(n_steps):
        q0 = q_start + i * BQ
        slot = i % 2
        l2, delta = _row_stats(l2_ptr, delta_ptr, row0q, q0, NQ, BQ, s_layout)
        mbarrier.wait(ready.index(slot), phase=(i // 2) & 1)
        dk, dv, dq = _pair_products(k_smem, v_smem, q_ring.index(slot), do_ring.index(slot), ds_smem, l2, delta, dk,
                                    dv, kw0, q0, NQ, NK, qk_scale_log2, IS_CAUSAL)
        mbarrier.arrive(empty.index(slot), count=1)  # every wgmma reading the slot has completed
        if DQ_SUM:
            _sum_dq(dq, dq_pair, dq_bars, i, ROLE, dq_desc, row0q + q0)
        else:
            _add_dq(dq, dq_pair[ROLE], dq_desc, dq32_ptr, row0q, q0, NQ, DQ_ATOMIC)
    tma.store_wait(pendings=0)
    _store_rows(dk * scale, dk_ptr, row0k, kw0, NK, D)
    _store_rows(dv, dv_ptr, row0k, kw0, NK, D)


@gluon.jit
def bwd_ws_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dq32_ptr, l2_ptr, delta_ptr, dk_ptr, dv_ptr, NQ, NK,
                  qk_scale_log2, scale, IS_CAUSAL: gl.constexpr, DQ_ATOMIC: gl.constexpr, DQ_SUM: gl.constexpr,
                  CONSUMER_REGS: gl.constexpr):
    """As ``bwd_plain_kernel`` for a key tile of 2 * BKW keys (BKW = k_desc's block rows): grid
    (B, cdiv(NK, 2 * BKW)); default partition = consumer of keys [k0, k0 + BKW), a 4-warp worker =
    consumer of [k0 + BKW, k0 + 2 BKW), a 1-warp worker = the TMA loader. Launch with num_warps=4."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    b = gl.program_id(0)
    k0 = gl.program_id(1) * (2 * BKW)
    row0q = b * NQ
    row0k = b * NK
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BKW, BQ], dtype)

    k0_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    k1_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    v0_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    v1_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [2, BQ, D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [2, BQ, D], do_desc.layout)
    ds0_smem = gl.allocate_shared_memory(dtype, [BKW, BQ], ds_layout)
    ds1_smem = gl.allocate_shared_memory(dtype, [BKW, BQ], ds_layout)
    dq0_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    dq1_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # DQ_SUM: full, free
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(2):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # two consumers release each slot
        mbarrier.init(dq_bars.index(s), count=1)

    q_start, n_steps = _query_steps(k0, NQ, BQ, IS_CAUSAL)
    gl.warp_specialize([
        (_ws_consumer, (k0_smem, v0_smem, q_ring, do_ring, ds0_smem, (dq0_smem, dq1_smem), dq_bars, kv_bar, ready,
                        empty, dq_desc, dq32_ptr, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0, q_start, n_steps,
                        NQ, NK, qk_scale_log2, scale, IS_CAUSAL, DQ_ATOMIC, DQ_SUM, 0)),
        (_ws_loader, (q_desc, k_desc, v_desc, do_desc, (k0_smem, k1_smem), (v0_smem, v1_smem), q_ring, do_ring, kv_bar,
                      ready, empty, row0q, row0k, k0, q_start, n_steps)),
        (_ws_consumer, (k1_smem, v1_smem, q_ring, do_ring, ds1_smem, (dq0_smem, dq1_smem), dq_bars, kv_bar, ready,
                        empty, dq_desc, dq32_ptr, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0 + BKW, q_start,
                        n_steps, NQ, NK, qk_scale_log2, scale, IS_CAUSAL, DQ_ATOMIC, DQ_SUM, 1)),
    ], [1, 4], [24, CONSUMER_REGS])
