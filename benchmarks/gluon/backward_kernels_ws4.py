"""Fourth-generation warp-specialised Gluon backward for sm_90 (issue 42): ``bwd_ws4_kernel``, the
``ws4_*`` variants: ``bwd_ws3_kernel``'s alternating-owner dQ mode (DQ_MODE 1, ``ws3_alt4_l2_kv``'s
levers: 4-slot ring, GROUP 2 launch order, K_w / V_w in registers) with the per-step row statistics
brought in by TMA and, optionally, the owner's dQ fence and reduce deferred. d = 64 only.

Why (ncu with stall sampling of ws3_alt4_l2_kv, records/2026-12-07-h100-gluon-backward/): ~10.5k of the
consumers' samples wait on the ``LDG.E.64`` of L2_i / Delta_i (``_row_stats``' ``gl.load`` at the top of
each step, long scoreboard); ~11.5k sit at ``FENCE.VIEW.ASYNC.S`` (``fence_async_shared`` after the
dS^T and dQ staging stores, ~4.8k per consumer at the dQ one), ~2k at the ``bar.sync`` before the
reduce; ~34k in the owner's ``ds_full`` try-wait loop (smem 0x28198 = ds_full[1], 0x281a0 =
ds_full[2]; the ``ready`` waits never retry): the owner of step i waits for the other consumer, which
owned step i - 1 and is late by its dQ epilogue. So:

* **Row statistics by TMA** (always): the pre-pass writes L2 and Delta into rows 0 and 1 of one fp32
  [2, R] tensor (R = B * NQ rounded up to 4, the padding zeroed); the loader copies the [2, BQ] box
  at column row0q + q0 into ``stats_ring[slot]`` with Q_i and dO_i, counted in ready[slot]'s expect
  bytes. Consumers read L2 just before the exponentials and Delta just before dS^T (``ld.shared``,
  no LDG in the loop). Columns past a batch element's end hold the next element's statistics (or
  zeros past R): finite, and P^T is zeroed for those queries (as with the masked loads before).
* ``DEFER`` 1: **the owner's dQ is stored but not fenced or reduced in its own step**: step i's owner
  stores dQ_i into its staging tile after the step's wgmma wait; in step i + 1 (which it does not own)
  the ``fence_async_shared`` after its dS^T stores covers both stores, Membar's ``bar.sync`` before its
  ``ds_full`` arrive serves both, and it then issues the reduce of dQ_i. The last owned step's reduce
  goes after the loop. One fence and one bar.sync fewer per two steps, both off the owner's epilogue
  (the critical path above). The staging tile is rewritten two steps later after ``store_wait(0)``,
  which now waits for a reduce issued one step (not two) earlier.
* ``UNROLL`` (as ws3: two steps per iteration, static ownership, no mid-step wait(0) for dQ).

Barrier protocol: ws3's mode 1 unchanged (``backward_kernels_ws3.py``'s docstring: kv_bar, ready[s],
empty[s] count 1 released by step i + 1's owner after its ds_full wait, ds_full[2 c + b]); only ready's
byte count grows by the statistics box, and the stats slot is released with the Q/dO slot: its last
reader (each consumer, step i) reads it before its ds_full arrive / wait of step i + 1, which precede
the release. The deferred reduce adds no mbarrier, so ``ws2_protocol_model.py``'s "lean1" still models
the protocol; the staging tile of consumer c: written in c's owned step i (after ``store_wait(0)``, which
covers c's reduce of step i - 2, issued in step i - 1), read by the reduce issued in step i + 1.
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

from benchmarks.gluon.backward_kernels import _query_steps, _store_rows, _visible, _zero_dk_dv
from benchmarks.gluon.kernels import tma_reduce_add, wgmma_layout


@gluon.jit
def _ws4_loader(q_desc, k_desc, v_desc, do_desc, st_desc, k0_smem, k1_smem, v0_smem, v1_smem, q_ring, do_ring,
                st_ring, kv_bar, ready, empty, row0q, row0k, k0, q_start, n_steps, SLOTS: gl.constexpr):
    """Producer (1 warp): K, V of the key tile once, then Q_i, dO_i and (L2, Delta)_i into slot i % SLOTS."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    mbarrier.expect(kv_bar, 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    tma.async_copy_global_to_shared(k_desc, [row0k + k0, 0], kv_bar, k0_smem)
    tma.async_copy_global_to_shared(v_desc, [row0k + k0, 0], kv_bar, v0_smem)
    tma.async_copy_global_to_shared(k_desc, [row0k + k0 + BKW, 0], kv_bar, k1_smem)
    tma.async_copy_global_to_shared(v_desc, [row0k + k0 + BKW, 0], kv_bar, v1_smem)
    nbytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes + st_desc.block_type.nbytes
    for i in range(n_steps):
        slot = i % SLOTS
        mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, nbytes)
        row = row0q + q_start + i * BQ
        tma.async_copy_global_to_shared(q_desc, [row, 0], bar, q_ring.index(slot))
        tma.async_copy_global_to_shared(do_desc, [row, 0], bar, do_ring.index(slot))
        tma.async_copy_global_to_shared(st_desc, [0, row], bar, st_ring.index(slot))


@gluon.jit
def _ws4_p_ds(s_t, dv, v_op, do_tile, st_tile, kw0, q0, NQ, NK, qk_scale_log2, IS_CAUSAL: gl.constexpr):
    """``_ws2_p_ds`` with L2 and Delta read from the slot's statistics tile (rows 0, 1) where they are used."""
    BKW: gl.constexpr = v_op.type.shape[0]
    BQ: gl.constexpr = do_tile.type.shape[0]
    D: gl.constexpr = do_tile.type.shape[1]
    dtype: gl.constexpr = do_tile.dtype
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=wgmma_layout(BKW, D, gl.num_warps()),
                                                 k_width=2)
    zero_s = gl.zeros([BKW, BQ], gl.float32, s_layout)
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, ))
    dp_t = warpgroup_mma(v_op, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    l2 = st_tile.slice(0, 1).load(s_layout)  # [1, BQ], broadcast over the keys
    p_t = gl.exp2(s_t * qk_scale_log2 - l2)
    ragged = (q0 + BQ > NQ) | (kw0 + BKW > NK)
    if IS_CAUSAL:
        ragged = ragged | (q0 < kw0 + BKW)
    if ragged:
        p_t = _visible(p_t, kw0, q0, NQ, NK, IS_CAUSAL)
    p_a = gl.convert_layout(p_t.to(dtype), a_layout)
    dv = warpgroup_mma(p_a, do_tile, dv, is_async=True)  # product 3
    delta = st_tile.slice(1, 1).load(s_layout)
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t, ))
    ds_t = (p_t * (dp_t - delta)).to(dtype)
    return s_t, dv, p_a, ds_t


@gluon.jit
def _ws4_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, q_ring, do_ring, st_ring, ds_own, ds_other, dq_stage,
              ready, empty, ds_full, dq_desc, row0q, kw0, q_start, n_steps, NQ, NK, qk_scale_log2,
              IS_CAUSAL: gl.constexpr, SLOTS: gl.constexpr, DEFER: gl.constexpr, ROLE: gl.constexpr,
              BUF: gl.constexpr, UNROLL: gl.constexpr):
    """Step i (i % 2 == BUF when UNROLL) of consumer ROLE; S^T_i in flight on entry, S^T_{i+1} on return."""
    BKW: gl.constexpr = k_own.type.shape[0]
    D: gl.constexpr = k_own.type.shape[1]
    BQ: gl.constexpr = q_ring.type.shape[1]
    OTHER: gl.constexpr = 1 - ROLE
    if UNROLL:
        buf: gl.constexpr = BUF
        owner: gl.constexpr = BUF == ROLE
    else:
        buf = i % 2
        owner = buf == ROLE
    kd_layout: gl.constexpr = wgmma_layout(BKW, D, gl.num_warps())
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kd_layout, k_width=2)
    zero_s = gl.zeros([BKW, BQ], gl.float32, s_layout)
    q0 = q_start + i * BQ
    slot = i % SLOTS
    q_tile = q_ring.index(slot)
    ds_buf = ds_own.index(buf)
    s_t, dv, p_a, ds_t = _ws4_p_ds(s_t, dv, v_op, do_ring.index(slot), st_ring.index(slot), kw0, q0, NQ, NK,
                                   qk_scale_log2, IS_CAUSAL)
    ds_buf.store(ds_t)
    ds_a = gl.convert_layout(ds_t, a_layout)
    dk = warpgroup_mma(ds_a, q_tile, dk, is_async=True)  # product 4
    fence_async_shared()  # dS^T (and, DEFER, our dQ staging store of step i - 1) before async-proxy reads
    dq = gl.zeros([BQ, D], gl.float32, wgmma_layout(BQ, D, gl.num_warps()))  # (non-owner: unused)
    if owner:  # product 5 over all 128 keys
        mbarrier.wait(ds_full.index(2 * OTHER + buf), (i // 2) & 1)
        mbarrier.arrive(empty.index((i + SLOTS - 1) % SLOTS), pred=i > 0)  # ws3: every reader of slot i - 1 done
        dq = warpgroup_mma(ds_buf.permute((1, 0)), k_own, dq, use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_other.index(buf).permute((1, 0)), k_other, dq, is_async=True)
        if not UNROLL:  # a run-time branch cannot yield an in-flight accumulator (as ws3)
            dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
    else:
        mbarrier.arrive(ds_full.index(2 * ROLE + buf))  # after Membar's bar.sync: all 4 warps stored, fenced
        if DEFER:  # step i - 1 was ours: its dQ stores are fenced above and published by that bar.sync (the
            if i > 0:  # reduce before the arrive would skip it: Membar saw the stores synced at the step's top)
                tma_reduce_add(dq_desc, [row0q + q0 - BQ, 0], dq_stage)
    nxt = (i + 1) % SLOTS
    mbarrier.wait(ready.index(nxt), ((i + 1) // SLOTS) & 1, pred=i + 1 < n_steps)
    s_t = warpgroup_mma(k_op, q_ring.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if UNROLL:
        if owner:
            dv, dk, dq, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, dq, p_a, ds_a))
        else:
            dv, dk, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, p_a, ds_a))
    else:
        dv, dk, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, p_a, ds_a))
    if owner:
        tma.store_wait(pendings=0)  # our previous reduce has read the staging tile
        dq_stage.store(dq)
        if not DEFER:
            fence_async_shared()
            tma_reduce_add(dq_desc, [row0q + q0, 0], dq_stage)
    return s_t, dk, dv


@gluon.jit
def _ws4_consumer(k_own, k_other, v_smem, q_ring, do_ring, st_ring, ds_own, ds_other, dq_stage, kv_bar, ready, empty,
                  ds_full, dq_desc, dk_ptr, dv_ptr, row0q, row0k, kw0, q_start, n_steps, NQ, NK, qk_scale_log2,
                  scale, IS_CAUSAL: gl.constexpr, SLOTS: gl.constexpr, DEFER: gl.constexpr, UNROLL: gl.constexpr,
                  ROLE: gl.constexpr):
    """Consumer ROLE (one warpgroup): dK, dV of keys [kw0, kw0 + 64); K_w, V_w as register A operands."""
    BKW: gl.constexpr = k_own.type.shape[0]
    D: gl.constexpr = k_own.type.shape[1]
    BQ: gl.constexpr = q_ring.type.shape[1]
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    sa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
    dk, dv = _zero_dk_dv(kv_bar, BKW, D)
    k_op = k_own.load(sa_layout)
    v_op = v_smem.load(sa_layout)
    mbarrier.wait(ready.index(0), 0, pred=n_steps > 0)
    s_t = warpgroup_mma(k_op, q_ring.index(0).permute((1, 0)), gl.zeros([BKW, BQ], gl.float32, s_layout),
                        use_acc=False, is_async=True)
    if UNROLL:
        for i in range(0, n_steps - 1, 2):
            s_t, dk, dv = _ws4_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, q_ring, do_ring, st_ring, ds_own,
                                    ds_other, dq_stage, ready, empty, ds_full, dq_desc, row0q, kw0, q_start,
                                    n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL, SLOTS, DEFER, ROLE, 0, 1)
            s_t, dk, dv = _ws4_step(i + 1, s_t, dk, dv, k_op, v_op, k_own, k_other, q_ring, do_ring, st_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, row0q, kw0,
                                    q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL, SLOTS, DEFER, ROLE, 1, 1)
        if n_steps % 2 == 1:
            s_t, dk, dv = _ws4_step(n_steps - 1, s_t, dk, dv, k_op, v_op, k_own, k_other, q_ring, do_ring, st_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, row0q, kw0,
                                    q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL, SLOTS, DEFER, ROLE, 0, 1)
    else:
        for i in range(n_steps):
            s_t, dk, dv = _ws4_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, q_ring, do_ring, st_ring, ds_own,
                                    ds_other, dq_stage, ready, empty, ds_full, dq_desc, row0q, kw0, q_start,
                                    n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL, SLOTS, DEFER, ROLE, 0, 0)
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, ))  # the discarded last S^T
    if DEFER:  # the reduce of our last owned step, if the last step was ours (else issued in the loop)
        if (n_steps > 0) & ((n_steps - 1) % 2 == ROLE):
            fence_async_shared()
            tma_reduce_add(dq_desc, [row0q + q_start + (n_steps - 1) * BQ, 0], dq_stage)
    tma.store_wait(pendings=0)
    _store_rows(dk * scale, dk_ptr, row0k, kw0, NK, D)
    _store_rows(dv, dv_ptr, row0k, kw0, NK, D)


@gluon.jit
def bwd_ws4_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, st_desc, dk_ptr, dv_ptr, B, NQ, NK, qk_scale_log2, scale,
                   IS_CAUSAL: gl.constexpr, SLOTS: gl.constexpr, GROUP: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                   DEFER: gl.constexpr = 0, UNROLL: gl.constexpr = 0):
    """dK, dV of one 128-key tile of one batch element, dQ reduce-added into dq_desc's fp32 buffer; st_desc:
    the [2, R] fp32 (L2; Delta) rows, block [2, BQ]. Grid and launch as ``bwd_ws2_kernel`` (maxnreg 168)."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(st_desc.block_type.shape[1] == BQ, "statistics box: [2, BQ]")
    if GROUP > 0:  # as _ws2_buffers: GROUP batch elements per key tile
        b = gl.program_id(2) * GROUP + gl.program_id(0)
    else:
        b = gl.program_id(0)
    k0 = gl.program_id(1) * (2 * BKW)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BKW, BQ], dtype)
    k0_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    k1_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    v0_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    v1_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [SLOTS, BQ, D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [SLOTS, BQ, D], do_desc.layout)
    st_ring = gl.allocate_shared_memory(gl.float32, [SLOTS, 2, BQ], st_desc.layout)
    ds0 = gl.allocate_shared_memory(dtype, [2, BKW, BQ], ds_layout)
    ds1 = gl.allocate_shared_memory(dtype, [2, BKW, BQ], ds_layout)
    dq0_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    dq1_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    row0q = b * NQ
    row0k = b * NK
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # [2 c + b]
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(SLOTS):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for c in gl.static_range(4):
        mbarrier.init(ds_full.index(c), count=1)

    q_start, n_steps = _query_steps(k0, NQ, BQ, IS_CAUSAL)
    gl.warp_specialize([
        (_ws4_consumer, (k0_smem, k1_smem, v0_smem, q_ring, do_ring, st_ring, ds0, ds1, dq0_smem, kv_bar, ready, empty,
                         ds_full, dq_desc, dk_ptr, dv_ptr, row0q, row0k, k0, q_start, n_steps, NQ, NK, qk_scale_log2,
                         scale, IS_CAUSAL, SLOTS, DEFER, UNROLL, 0)),
        (_ws4_loader, (q_desc, k_desc, v_desc, do_desc, st_desc, k0_smem, k1_smem, v0_smem, v1_smem, q_ring, do_ring,
                       st_ring, kv_bar, ready, empty, row0q, row0k, k0, q_start, n_steps, SLOTS)),
        (_ws4_consumer, (k1_smem, k0_smem, v1_smem, q_ring, do_ring, st_ring, ds1, ds0, dq1_smem, kv_bar, ready, empty,
                         ds_full, dq_desc, dk_ptr, dv_ptr, row0q, row0k, k0 + BKW, q_start, n_steps, NQ, NK,
                         qk_scale_log2, scale, IS_CAUSAL, SLOTS, DEFER, UNROLL, 1)),
    ], [1, 4], [24, CONSUMER_REGS])
