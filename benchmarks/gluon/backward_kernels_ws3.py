"""Third-generation warp-specialised Gluon backward for sm_90 (issue 42): ``bwd_ws3_kernel``, the
``ws3_*`` variants: ``bwd_ws2_kernel``'s dQ modes 1 (alternating owner) and 2 (column split) with
fewer warpgroup barriers per step. Same contract, partitions, tiles and loader as ws2
(``backward_kernels_ws2.py``); d = 64 only.

Why: ncu of ws2_alt_l2_kv (records/2026-12-07-h100-gluon-backward/ncu-bprop-vs-ws2_alt_l2_kv.txt)
puts 31% of the consumers' issue gaps in "stall barrier" (warps of a warpgroup waiting for their
siblings at ``bar.sync 0|3, 128``). None of those bar.syncs is written in the source: Gluon's
``mbarrier.arrive`` is issued by one thread, and triton 3.6's Membar pass then inserts a warpgroup
``bar.sync`` before every arrive (the arrive "publishes" the other threads' work) and another before
the next shared-memory or mbarrier operation after it. Probed on tiny kernels (README, "ws3"):
wait -> wait, wgmma_wait -> mbarrier.wait and fence -> mbarrier.wait need none; wait -> arrive,
arrive -> arrive, arrive -> wait and arrive -> wgmma each get one. So the levers are fewer arrives
per step and arrives placed next to a bar.sync that a shared-memory hazard needs anyway:

* **No ds_free** (ws2's modes 1, 2 wait and arrive on it every step): it is implied by the other
  waits (ws2_protocol_model.py finds no hazard without it; argument under "Hazards").
* **empty[s] has count 1, one arrive per step**: slot s of step i is released by *one* consumer in
  step i + 1, after its ds_full wait of step i + 1. That wait implies that the other consumer has
  passed its wgmma wait at the end of step i (it arrives ds_full of step i + 1 only after it), and
  the arriving consumer passed its own; so every wgmma reading slot i has completed. Mode 1: the
  owner of step i + 1 releases; mode 2: consumer 0 releases. The slot comes back half a step later
  than in ws2 (3 slots still leave the loader about 1.5 steps); ``SLOTS`` 4 gives one more.
* **Mode 1, UNROLL only: the owner issues no wait(0) mid-step**: ws2's owner waits for its dQ
  wgmmas (and with them dV, dK) before issuing S^T of step i + 1; with static ownership the step's
  single ``warpgroup_mma_wait(1)`` after S^T_{i+1} completes dQ as well. A run-time branch cannot
  yield an in-flight accumulator (Gluon refuses), so the rolled loop keeps ws2's wait(0).
* **UNROLL** (constexpr, default 0): two steps per iteration, dS^T buffer and ownership static
  (no predicated-off arrives whose Membar barriers both paths pay). At d = 64 it spills (4-164 B,
  README), so no listed variant uses it.

Barrier protocol (b = i % 2; c = this consumer, o = the other; parity as in ws2):

==============  =====  ==========================================  ========================================
barrier         count  arrives                                     waits
==============  =====  ==========================================  ========================================
kv_bar          1      loader's expect                             both consumers, parity 0, once
ready[s]        1      loader's expect, Q_i/dO_i into s = i % S    consumers, parity (i // S) & 1
empty[s]        1      step i + 1's releaser (mode 1: its owner,   loader, parity ((i // S) & 1) ^ 1
                       mode 2: consumer 0) after its ds_full wait  before refilling s for step i
ds_full[2c+b]   1      consumer c after storing and fencing        the other consumer in step i (mode 1:
                       dS^T_i (mode 1: in steps it does not own)   when it owns i), parity (i // 2) & 1
==============  =====  ==========================================  ========================================

Hazards (each also checked by ws2_protocol_model.py, modes "lean1", "lean2"):
* ds_c[b] is rewritten by c in step i + 2; the other's wgmma reading it (step i) completed at the
  other's wait(1) of step i, which precedes its dS^T store and ds_full arrive of step i + 1, which c
  waits for in step i + 1 (mode 1: c owns step i + 1 when it lent ds_c[b] in step i; mode 2: every
  step). c's own dQ wgmma reading ds_c[c] (mode 1) completes at c's wait(1) of the same step.
* Ring slot of step i: released as above; the loader refills it for step i + S.
* dQ staging tile of c: ``tma.store_wait(0)`` before rewriting it (c's previous reduce).
Deadlock freedom: ds_full(i) needs ready(i); the arrive on empty(i) comes after ds_full(i + 1), i.e.
ready(i + 1), which needs empty(i + 1 - S): earlier than i for S >= 2. In mode 2 it also comes after
consumer 0's ready(i + 2) wait, which needs empty(i + 2 - S): S >= 3 (asserted; the model deadlocks
with 2 slots).
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

from benchmarks.gluon.backward_kernels import _query_steps, _row_stats, _store_rows, _visible, _zero_dk_dv
from benchmarks.gluon.backward_kernels_ws2 import _ws2_buffers, _ws2_loader, _ws2_p_ds
from benchmarks.gluon.kernels import tma_reduce_add, wgmma_layout


@gluon.jit
def _ws3_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, kh_smem, q_ring, do_ring, ds_own, ds_other, dq_stage,
              ready, empty, ds_full, dq_desc, dqh_desc, l2_ptr, delta_ptr, row0q, kw0, q_start, n_steps, NQ, NK,
              qk_scale_log2, IS_CAUSAL: gl.constexpr, DQ_MODE: gl.constexpr, SLOTS: gl.constexpr,
              ROLE: gl.constexpr, BUF: gl.constexpr, UNROLL: gl.constexpr):
    """Step i (i % 2 == BUF) of consumer ROLE; S^T_i (s_t) is in flight on entry, S^T_{i+1} on return."""
    BKW: gl.constexpr = k_own.type.shape[0]
    D: gl.constexpr = k_own.type.shape[1]
    DH: gl.constexpr = kh_smem.type.shape[2]
    BQ: gl.constexpr = q_ring.type.shape[1]
    OTHER: gl.constexpr = 1 - ROLE
    # the dS^T buffer: BUF (constexpr) when the loop is unrolled, else i % 2 at run time; so is owner (mode 1:
    # this consumer computes and reduces step i's dQ)
    if UNROLL:
        buf: gl.constexpr = BUF
        owner: gl.constexpr = BUF == ROLE
    else:
        buf = i % 2
        owner = buf == ROLE
    kd_layout: gl.constexpr = wgmma_layout(BKW, D, gl.num_warps())
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kd_layout, k_width=2)
    dtype: gl.constexpr = q_ring.dtype
    zero_s = gl.zeros([BKW, BQ], gl.float32, s_layout)
    q0 = q_start + i * BQ
    slot = i % SLOTS
    q_tile = q_ring.index(slot)
    do_tile = do_ring.index(slot)
    ds_buf = ds_own.index(buf)
    l2, delta = _row_stats(l2_ptr, delta_ptr, row0q, q0, NQ, BQ, s_layout)  # in flight with S^T
    # -- S^T_i done; P^T while dP^T runs --
    s_t, dv, p_a, ds_t = _ws2_p_ds(s_t, dv, v_op, do_tile, l2, delta, kw0, q0, NQ, NK, qk_scale_log2, IS_CAUSAL)
    ds_buf.store(ds_t)  # no ds_free wait: implied (module docstring, "Hazards")
    ds_a = gl.convert_layout(ds_t, a_layout)
    dk = warpgroup_mma(ds_a, q_tile, dk, is_async=True)  # product 4
    fence_async_shared()  # dS^T: generic-proxy stores, then wgmma (async proxy) reads, here and in the other
    if DQ_MODE == 1:
        dq = gl.zeros([BQ, D], gl.float32, wgmma_layout(BQ, D, gl.num_warps()))  # (non-owner: unused)
        if owner:  # product 5 over all 128 keys: own dS^T K_own + other's dS^T K_other
            mbarrier.wait(ds_full.index(2 * OTHER + buf), (i // 2) & 1)
            # the other passed its wait(1) of step i - 1 (before this ds_full), we passed ours: every
            # wgmma that read slot i - 1 has completed. Membar's bar.sync before this arrive also orders
            # our dS^T stores before the dQ wgmma below.
            mbarrier.arrive(empty.index((i + SLOTS - 1) % SLOTS), pred=i > 0)
            dq = warpgroup_mma(ds_buf.permute((1, 0)), k_own, dq, use_acc=False, is_async=True)
            dq = warpgroup_mma(ds_other.index(buf).permute((1, 0)), k_other, dq, is_async=True)
            if not UNROLL:  # a run-time branch cannot yield an in-flight accumulator: complete dQ here (as ws2)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        else:
            mbarrier.arrive(ds_full.index(2 * ROLE + buf))  # after Membar's bar.sync: all 4 warps stored
    else:  # product 5, columns [32 ROLE, 32 ROLE + 32) over all 128 keys
        mbarrier.arrive(ds_full.index(2 * ROLE + buf))
        mbarrier.wait(ds_full.index(2 * OTHER + buf), (i // 2) & 1)
        dq = warpgroup_mma(ds_buf.permute((1, 0)), kh_smem.index(2 * ROLE + ROLE),
                           gl.zeros([BQ, DH], gl.float32, wgmma_layout(BQ, DH, gl.num_warps())), use_acc=False,
                           is_async=True)
        dq = warpgroup_mma(ds_other.index(buf).permute((1, 0)), kh_smem.index(2 * ROLE + OTHER), dq, is_async=True)
    # -- next step's S^T, in flight during this step's dQ epilogue (discarded after the last step) --
    nxt = (i + 1) % SLOTS
    mbarrier.wait(ready.index(nxt), ((i + 1) // SLOTS) & 1, pred=i + 1 < n_steps)
    s_t = warpgroup_mma(k_op, q_ring.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if DQ_MODE == 1:
        if UNROLL:  # static ownership: the owner's dQ completes here, with dV, dK
            if owner:
                dv, dk, dq, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, dq, p_a, ds_a))
            else:
                dv, dk, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, p_a, ds_a))
        else:  # dQ completed above
            dv, dk, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, p_a, ds_a))
        if owner:
            tma.store_wait(pendings=0)  # our reduce of step i - 2 has read the staging tile
            dq_stage.store(dq)
            fence_async_shared()
            tma_reduce_add(dq_desc, [row0q + q0, 0], dq_stage)
    else:
        dv, dk, dq, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, dq, p_a, ds_a))
        if ROLE == 0:  # after this step's ds_full wait; here, next to store_wait's bar.sync (one bar, not two)
            mbarrier.arrive(empty.index((i + SLOTS - 1) % SLOTS), pred=i > 0)
        tma.store_wait(pendings=0)  # our reduce of step i - 1 has read the staging tile
        dq_stage.store(dq)
        fence_async_shared()
        tma_reduce_add(dqh_desc, [row0q + q0, ROLE * DH], dq_stage)
    return s_t, dk, dv


@gluon.jit
def _ws3_consumer(k_own, k_other, v_smem, kh_smem, q_ring, do_ring, ds_own, ds_other, dq_stage, kv_bar, ready, empty,
                  ds_full, dq_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, kw0, q_start, n_steps,
                  NQ, NK, qk_scale_log2, scale, IS_CAUSAL: gl.constexpr, DQ_MODE: gl.constexpr, SLOTS: gl.constexpr,
                  KV_REGS: gl.constexpr, UNROLL: gl.constexpr, ROLE: gl.constexpr):
    """Consumer ROLE (one warpgroup): dK, dV of keys [kw0, kw0 + 64); UNROLL: two query steps per iteration."""
    BKW: gl.constexpr = k_own.type.shape[0]
    D: gl.constexpr = k_own.type.shape[1]
    BQ: gl.constexpr = q_ring.type.shape[1]
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    sa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
    dk, dv = _zero_dk_dv(kv_bar, BKW, D)
    if KV_REGS >= 1:  # K_w (and V_w) as register A operands of S^T (dP^T), as in ws2
        k_op = k_own.load(sa_layout)
    else:
        k_op = k_own
    if KV_REGS >= 2:
        v_op = v_smem.load(sa_layout)
    else:
        v_op = v_smem
    mbarrier.wait(ready.index(0), 0, pred=n_steps > 0)
    s_t = warpgroup_mma(k_op, q_ring.index(0).permute((1, 0)), gl.zeros([BKW, BQ], gl.float32, s_layout),
                        use_acc=False, is_async=True)
    if UNROLL:  # spills at d = 64 (README): kept for a later register budget
        # pairs of steps (dS^T buffer 0, then 1), then a last odd step outside the loop: an `if` inside the
        # loop would merge Membar's state of both paths and cost a bar.sync per iteration
        for i in range(0, n_steps - 1, 2):
            s_t, dk, dv = _ws3_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, kh_smem, q_ring, do_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, dqh_desc, l2_ptr,
                                    delta_ptr, row0q, kw0, q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL,
                                    DQ_MODE, SLOTS, ROLE, 0, 1)
            s_t, dk, dv = _ws3_step(i + 1, s_t, dk, dv, k_op, v_op, k_own, k_other, kh_smem, q_ring, do_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, dqh_desc, l2_ptr,
                                    delta_ptr, row0q, kw0, q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL,
                                    DQ_MODE, SLOTS, ROLE, 1, 1)
        if n_steps % 2 == 1:
            s_t, dk, dv = _ws3_step(n_steps - 1, s_t, dk, dv, k_op, v_op, k_own, k_other, kh_smem, q_ring, do_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, dqh_desc, l2_ptr,
                                    delta_ptr, row0q, kw0, q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL,
                                    DQ_MODE, SLOTS, ROLE, 0, 1)
    else:  # one step per iteration, ownership and dS^T buffer at run time
        for i in range(n_steps):
            s_t, dk, dv = _ws3_step(i, s_t, dk, dv, k_op, v_op, k_own, k_other, kh_smem, q_ring, do_ring,
                                    ds_own, ds_other, dq_stage, ready, empty, ds_full, dq_desc, dqh_desc, l2_ptr,
                                    delta_ptr, row0q, kw0, q_start, n_steps, NQ, NK, qk_scale_log2, IS_CAUSAL,
                                    DQ_MODE, SLOTS, ROLE, 0, 0)
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, ))  # the discarded last S^T
    tma.store_wait(pendings=0)
    _store_rows(dk * scale, dk_ptr, row0k, kw0, NK, D)
    _store_rows(dv, dv_ptr, row0k, kw0, NK, D)


@gluon.jit
def bwd_ws3_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, kh_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, B,
                   NQ, NK, qk_scale_log2, scale, IS_CAUSAL: gl.constexpr, DQ_MODE: gl.constexpr, SLOTS: gl.constexpr,
                   GROUP: gl.constexpr, CONSUMER_REGS: gl.constexpr, KV_REGS: gl.constexpr = 0,
                   UNROLL: gl.constexpr = 0):
    """As ``bwd_ws2_kernel`` (same arguments, grid and launch options), DQ_MODE 1 or 2 only."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert((DQ_MODE == 1) | (DQ_MODE == 2), "ws3: dQ modes 1 (alternating owner) and 2 (split) only")
    gl.static_assert((DQ_MODE == 1) | (SLOTS >= 3), "ws3 mode 2 releases a slot after the next ready wait")
    (b, k0, k0_smem, k1_smem, v0_smem, v1_smem, q_ring, do_ring, ds0, ds1, kh_smem, dq0_smem,
     dq1_smem) = _ws2_buffers(q_desc, k_desc, v_desc, do_desc, dq_desc, kh_desc, dqh_desc, DQ_MODE, SLOTS, GROUP)
    row0q = b * NQ
    row0k = b * NK
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # [2 c + b]
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(SLOTS):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)  # one releaser per step (module docstring)
    for c in gl.static_range(4):
        mbarrier.init(ds_full.index(c), count=1)

    q_start, n_steps = _query_steps(k0, NQ, BQ, IS_CAUSAL)
    gl.warp_specialize([
        (_ws3_consumer, (k0_smem, k1_smem, v0_smem, kh_smem, q_ring, do_ring, ds0, ds1, dq0_smem, kv_bar, ready,
                         empty, ds_full, dq_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0,
                         q_start, n_steps, NQ, NK, qk_scale_log2, scale, IS_CAUSAL, DQ_MODE, SLOTS, KV_REGS, UNROLL,
                         0)),
        (_ws2_loader, (q_desc, k_desc, v_desc, do_desc, kh_desc, k0_smem, k1_smem, v0_smem, v1_smem, kh_smem, q_ring,
                       do_ring, kv_bar, ready, empty, row0q, row0k, k0, q_start, n_steps, SLOTS, DQ_MODE)),
        (_ws3_consumer, (k1_smem, k0_smem, v1_smem, kh_smem, q_ring, do_ring, ds1, ds0, dq1_smem, kv_bar, ready,
                         empty, ds_full, dq_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0 + BKW,
                         q_start, n_steps, NQ, NK, qk_scale_log2, scale, IS_CAUSAL, DQ_MODE, SLOTS, KV_REGS, UNROLL,
                         1)),
    ], [1, 4], [24, CONSUMER_REGS])
