"""Second-generation warp-specialised Gluon backward kernel for sm_90 (issue 42): ``bwd_ws2_kernel``.

Same contract and notation as ``backward_kernels.py`` (module docstring there: 2-D views, keys as
rows, ragged n, dK/dQ scaled at the end), same partitions as ``bwd_ws_kernel`` (a 1-warp TMA
loader, consumer warpgroups 0 and 1 owning keys [k0, k0 + 64) and [k0 + 64, k0 + 128) of a
128-key tile, query step 64). d = 64 only (``backward.py`` runs ws_dqsum's kernel for d = 128:
three slots and four dS^T buffers would need 256 KB of shared memory). What is new, each a
constexpr so that variants isolate one lever:

* **Software pipelining across query steps** (always on): a consumer issues step i + 1's S^T
  wgmma *before* it waits for step i's dV, dK, dQ products and runs step i's dQ epilogue, so the
  tensor cores have queued work while the dQ hand-over / staging store / TMA reduce run.
  ``warpgroup_mma_wait(num_outstanding=1)`` completes everything but S^T_{i+1} (commit groups
  complete in order). dP^T_{i+1} is issued at the top of step i + 1, right after S^T_{i+1}'s
  wait(0), and runs while P^T is exponentiated. Only S^T crosses the loop's back edge, and it is
  read only after a wait(0): with S^T *and* dP^T in flight across the back edge and a wait(1),
  ptxas 3.6 cannot prove the registers complete and serialises every wgmma (C7514); L2/Delta
  prefetched one step ahead cost 32 registers and spilled (non-causal), so they load at the top.
* ``SLOTS``: depth of the Q/dO ring (2 or 3); with pipelining a consumer waits for step i + 1's
  slot in the middle of step i, so a third slot keeps the loader a step further ahead.
* ``DQ_MODE`` (how the two consumers' dQ shares of a step, over 64 keys each, become one
  reduce-add of the step's [64, d] dQ over 128 keys; all three have ws_dqsum's reduce traffic):
  0: **hand-over** as ws_dqsum (consumer 1 stores its fp32 partial, consumer 0 loads and adds it).
  1: **alternating owner**: at step i consumer i % 2 computes the whole dQ_i = dS_0 K_0 + dS_1 K_1
  (two chained wgmmas, the other consumer's dS^T read from *its* shared buffer) and issues the
  reduce; the other does no dQ work that step. No 16 KB register->smem->register hand-over and no
  add; the consumers drift half a step apart (one exponentiates while the other's wgmmas run).
  2: **column split** (FlashAttention-3's): every step consumer c computes dQ_i[:, 32c : 32c + 32]
  over all 128 keys (two chained m64n32 wgmmas: own dS^T with K_own[:, cols], the other's dS^T
  with K_other[:, cols]; the column halves of K are loaded a second time by TMA as [64, 32] tiles)
  and reduce-adds its [64, 32] half. Balanced, no branch, no hand-over; each consumer waits for
  the other's dS^T every step.
* ``GROUP``: launch order. 0: grid (B, key tiles), batch fastest (as bwd_ws_kernel). G > 0: grid
  (G, key tiles, B / G); CTAs walk G batch elements at a time, key tile outer, batch inner. All key tiles of
  G batch elements then run at once, so the CTAs that read Q_i/dO_i and reduce into dQ_i of the
  same rows do so a few steps apart and hit L2 (Q, dO, dQ32 are 67 MB each at the shape of
  record; L2 is 50 MB). A greedy-schedule model (README) gives the same makespan as batch-fastest.

Barrier protocol (shared memory, initialised before gl.warp_specialize; "parity p" = mbarrier.wait
phase argument; b = i % 2 the dS^T buffer of step i):

==============  =====  ==========================================  ========================================
barrier         count  arrives                                     waits
==============  =====  ==========================================  ========================================
kv_bar          1      loader's expect (K, V, and K's column       both consumers, parity 0, once
                       halves in mode 2)
ready[s]        1      loader's expect, Q_i/dO_i into s = i % S    consumers, parity (i // S) & 1; step
                                                                   i's wait happens during step i - 1
empty[s]        2      each consumer once per step, after the      loader, parity ((i // S) & 1) ^ 1
                       wait that completes dV_i, dK_i (and dQ_i)   before refilling s for step i
dq_bars[0/1]    1      (mode 0) full / free of the hand-over       as ``backward_kernels._sum_dq``
ds_full[2c+b]   1      (modes 1, 2) consumer c after storing and   the other consumer at step i (mode 1:
                       fencing dS^T_i (mode 1: steps it doesn't    when it owns i), parity (i // 2) & 1
                       own)
ds_free[2c+b]   1      (modes 1, 2) the other consumer once its    consumer c before rewriting buffer b
                       wgmmas reading dS^T_i of c completed        (step i + 2), parity ((i//2) & 1) ^ 1
==============  =====  ==========================================  ========================================

One ds_full/ds_free pair per (consumer, buffer), not per consumer: with one ds_full per consumer,
a consumer could (without ds_free) store two steps' dS^T before the other waits for the first; the
barrier would complete two phases and alias the parity (a deadlock). Per buffer, a barrier is never
more than one phase ahead of its waiter even without ds_free, which the other waits already imply
(ring back-pressure, ds_full of the next step); it stays as a guard. ``ws2_protocol_model.py``
checks this protocol (random interleavings, deadlocks and buffer hazards) on the CPU.
Deadlock freedom: every wait is on an event of the same or an earlier step that its producer
reaches without waiting on the waiter's later events (empty(i - 1) precedes ready(i + 1);
ds_full(i) needs only ready(i) and ds_free(i - 2)).

Prologue/epilogue of the pipeline: step 0's S^T is issued before the loop and, on the last step,
a "next" S^T is issued on a slot that will not be refilled (its ready wait is predicated off; the
result is discarded and drained by a final wait(0)). With n_steps <= 0 (causal, a key tile past
NQ) only that product runs, on stale shared memory, and nothing is stored but zero dK/dV rows.
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

from benchmarks.gluon.backward_kernels import _row_stats, _store_rows, _sum_dq, _visible
from benchmarks.gluon.kernels import tma_reduce_add, wgmma_layout


@gluon.jit
def _ws2_loader(q_desc, k_desc, v_desc, do_desc, kh_desc, k0_smem, k1_smem, v0_smem, v1_smem, kh_smem, q_ring,
                do_ring, kv_bar, ready, empty, row0q, row0k, k0, q_start, n_steps, SLOTS: gl.constexpr,
                DQ_MODE: gl.constexpr):
    """Producer partition (1 warp): K, V of the key tile (and, mode 2, K's column halves: kh_smem[2 c + h]
    = columns [32 c, 32 c + 32) of key block h) once, then Q_i, dO_i into slot i % SLOTS."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    DH: gl.constexpr = kh_desc.block_type.shape[1]
    kv_bytes: gl.constexpr = 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    if DQ_MODE == 2:
        mbarrier.expect(kv_bar, kv_bytes + 4 * kh_desc.block_type.nbytes)
        for c in gl.static_range(2):
            for h in gl.static_range(2):
                tma.async_copy_global_to_shared(kh_desc, [row0k + k0 + h * BKW, c * DH], kv_bar, kh_smem.index(2 * c + h))
    else:
        mbarrier.expect(kv_bar, kv_bytes)
    tma.async_copy_global_to_shared(k_desc, [row0k + k0, 0], kv_bar, k0_smem)
    tma.async_copy_global_to_shared(v_desc, [row0k + k0, 0], kv_bar, v0_smem)
    tma.async_copy_global_to_shared(k_desc, [row0k + k0 + BKW, 0], kv_bar, k1_smem)
    tma.async_copy_global_to_shared(v_desc, [row0k + k0 + BKW, 0], kv_bar, v1_smem)
    nbytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes
    for i in range(n_steps):
        slot = i % SLOTS
        mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(q_desc, [row0q + q_start + i * BQ, 0], bar, q_ring.index(slot))
        tma.async_copy_global_to_shared(do_desc, [row0q + q_start + i * BQ, 0], bar, do_ring.index(slot))


@gluon.jit
def _ws2_p_ds(s_t, dv, v_op, do_tile, l2, delta, kw0, q0, NQ, NK, qk_scale_log2, IS_CAUSAL: gl.constexpr):
    """A consumer step's first half, S^T_i in flight on entry: wait for S^T, issue dP^T = V_w dO_i^T, compute
    P^T (masked where needed) while it runs, issue dV += P^T dO_i, wait for dP^T, dS^T = P^T (dP^T - Delta).
    Returns (S^T, dV in flight, P^T as the register A operand, dS^T in the input dtype)."""
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
    p_t = gl.exp2(s_t * qk_scale_log2 - l2)
    ragged = (q0 + BQ > NQ) | (kw0 + BKW > NK)
    if IS_CAUSAL:
        ragged = ragged | (q0 < kw0 + BKW)
    if ragged:
        p_t = _visible(p_t, kw0, q0, NQ, NK, IS_CAUSAL)
    p_a = gl.convert_layout(p_t.to(dtype), a_layout)
    dv = warpgroup_mma(p_a, do_tile, dv, is_async=True)  # product 3
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t, ))
    ds_t = (p_t * (dp_t - delta)).to(dtype)
    return s_t, dv, p_a, ds_t


@gluon.jit
def _ws2_consumer(k_own, k_other, v_smem, kh_smem, q_ring, do_ring, ds_own, ds_other, dq_pair, dqh_pair, kv_bar, ready,
                  empty, dq_bars, ds_full, ds_free, dq_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k,
                  kw0, q_start, n_steps, NQ, NK, qk_scale_log2, scale, IS_CAUSAL: gl.constexpr,
                  DQ_MODE: gl.constexpr, SLOTS: gl.constexpr, KV_REGS: gl.constexpr, ROLE: gl.constexpr):
    """Consumer ROLE (one warpgroup): dK, dV of keys [kw0, kw0 + 64), pipelined over query steps (module
    docstring). ds_own / ds_other: [2, 64, BQ] dS^T buffers of this and the other consumer."""
    BKW: gl.constexpr = k_own.type.shape[0]
    D: gl.constexpr = k_own.type.shape[1]
    DH: gl.constexpr = kh_smem.type.shape[2]
    BQ: gl.constexpr = q_ring.type.shape[1]
    OTHER: gl.constexpr = 1 - ROLE
    kd_layout: gl.constexpr = wgmma_layout(BKW, D, gl.num_warps())
    s_layout: gl.constexpr = wgmma_layout(BKW, BQ, gl.num_warps())
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kd_layout, k_width=2)
    dtype: gl.constexpr = q_ring.dtype
    dk = gl.zeros([BKW, D], gl.float32, kd_layout)
    dv = gl.zeros([BKW, D], gl.float32, kd_layout)
    zero_s = gl.zeros([BKW, BQ], gl.float32, s_layout)
    if DQ_MODE == 2:
        zero_dq = gl.zeros([BQ, DH], gl.float32, wgmma_layout(BQ, DH, gl.num_warps()))
    else:
        zero_dq = gl.zeros([BQ, D], gl.float32, wgmma_layout(BQ, D, gl.num_warps()))

    # -- pipeline prologue: step 0's S^T --
    mbarrier.wait(kv_bar, phase=0)
    # KV_REGS >= 1: K_w (>= 2: and V_w) as register A operands of S^T (dP^T), loaded once: RS wgmmas
    # read only Q^T (dO^T) from shared memory, 8 KB less per product and consumer-step
    sa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
    if KV_REGS >= 1:
        k_op = k_own.load(sa_layout)
    else:
        k_op = k_own
    if KV_REGS >= 2:
        v_op = v_smem.load(sa_layout)
    else:
        v_op = v_smem
    mbarrier.wait(ready.index(0), 0, pred=n_steps > 0)
    s_t = warpgroup_mma(k_op, q_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    for i in range(n_steps):
        q0 = q_start + i * BQ
        slot = i % SLOTS
        q_tile = q_ring.index(slot)
        do_tile = do_ring.index(slot)
        buf = i % 2
        ds_buf = ds_own.index(buf)
        l2, delta = _row_stats(l2_ptr, delta_ptr, row0q, q0, NQ, BQ, s_layout)  # in flight with S^T
        owner = buf == ROLE  # mode 1: this consumer computes and reduces step i's dQ
        not_owner = buf != ROLE
        # -- S^T (issued during the previous step) done; P^T while dP^T runs --
        s_t, dv, p_a, ds_t = _ws2_p_ds(s_t, dv, v_op, do_tile, l2, delta, kw0, q0, NQ, NK, qk_scale_log2,
                                       IS_CAUSAL)
        # the other consumer's wgmmas of step i - 2 read ds_buf (mode 1: only on steps it owns)
        if DQ_MODE == 1:
            mbarrier.wait(ds_free.index(2 * ROLE + buf), ((i // 2) & 1) ^ 1, pred=not_owner)
        if DQ_MODE == 2:
            mbarrier.wait(ds_free.index(2 * ROLE + buf), ((i // 2) & 1) ^ 1)
        ds_buf.store(ds_t)
        ds_a = gl.convert_layout(ds_t, a_layout)
        dk = warpgroup_mma(ds_a, q_tile, dk, is_async=True)  # product 4
        fence_async_shared()  # dS^T: generic-proxy stores, then wgmma (async proxy) reads, here and in the other consumer
        if DQ_MODE == 0:
            dq = warpgroup_mma(ds_buf.permute((1, 0)), k_own, zero_dq, use_acc=False, is_async=True)  # product 5
        elif DQ_MODE == 1:
            mbarrier.arrive(ds_full.index(2 * ROLE + buf), pred=not_owner)
            dq = zero_dq
            if owner:  # product 5 over all 128 keys: own dS^T K_own + other's dS^T K_other
                mbarrier.wait(ds_full.index(2 * OTHER + buf), (i // 2) & 1)
                dq = warpgroup_mma(ds_buf.permute((1, 0)), k_own, zero_dq, use_acc=False, is_async=True)
                dq = warpgroup_mma(ds_other.index(buf).permute((1, 0)), k_other, dq, is_async=True)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))  # also completes dV, dK
                mbarrier.arrive(ds_free.index(2 * OTHER + buf))
        else:  # product 5, columns [32 ROLE, 32 ROLE + 32) over all 128 keys
            dq = warpgroup_mma(ds_buf.permute((1, 0)), kh_smem.index(2 * ROLE + ROLE), zero_dq, use_acc=False,
                               is_async=True)
            mbarrier.arrive(ds_full.index(2 * ROLE + buf))
            mbarrier.wait(ds_full.index(2 * OTHER + buf), (i // 2) & 1)
            dq = warpgroup_mma(ds_other.index(buf).permute((1, 0)), kh_smem.index(2 * ROLE + OTHER), dq,
                               is_async=True)
        # -- next step's S^T, in flight during this step's dQ epilogue --
        nxt = (i + 1) % SLOTS
        mbarrier.wait(ready.index(nxt), ((i + 1) // SLOTS) & 1, pred=i + 1 < n_steps)
        s_t = warpgroup_mma(k_op, q_ring.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dv, dk, dq, p_a, ds_a = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dk, dq, p_a, ds_a))
        mbarrier.arrive(empty.index(slot), count=1)  # step i's wgmmas that read the slot have completed
        if DQ_MODE == 0:
            _sum_dq(dq, dq_pair, dq_bars, i, ROLE, dq_desc, row0q + q0)
        elif DQ_MODE == 1:
            if owner:
                tma.store_wait(pendings=0)  # the reduce of step i - 2 has read the staging tile
                dq_pair[ROLE].store(dq)
                fence_async_shared()
                tma_reduce_add(dq_desc, [row0q + q0, 0], dq_pair[ROLE])
        else:
            mbarrier.arrive(ds_free.index(2 * OTHER + buf))  # our wgmma reading the other's dS^T_i completed
            tma.store_wait(pendings=0)  # the reduce of step i - 1 has read the staging tile
            dqh_pair[ROLE].store(dq)
            fence_async_shared()
            tma_reduce_add(dqh_desc, [row0q + q0, ROLE * DH], dqh_pair[ROLE])
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, ))  # the discarded last S^T
    tma.store_wait(pendings=0)
    _store_rows(dk * scale, dk_ptr, row0k, kw0, NK, D)
    _store_rows(dv, dv_ptr, row0k, kw0, NK, D)


@gluon.jit
def _ws2_buffers(q_desc, k_desc, v_desc, do_desc, dq_desc, kh_desc, dqh_desc, DQ_MODE: gl.constexpr,
                 SLOTS: gl.constexpr, GROUP: gl.constexpr):
    """This program's (batch element, first key) and the shared-memory tiles of ``bwd_ws2_kernel`` (also
    ``bwd_ws3_kernel``'s), barriers aside: K, V halves, the Q/dO ring, dS^T buffers of both consumers, K's
    column halves (mode 2; else a token allocation) and the two dQ staging tiles."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    DH: gl.constexpr = kh_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    if GROUP > 0:  # grid (GROUP, key tiles, B // GROUP): x fastest, so GROUP batch elements per key tile
        b = gl.program_id(2) * GROUP + gl.program_id(0)
        t = gl.program_id(1)
    else:
        b = gl.program_id(0)
        t = gl.program_id(1)
    k0 = t * (2 * BKW)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BKW, BQ], dtype)

    k0_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    k1_smem = gl.allocate_shared_memory(dtype, [BKW, D], k_desc.layout)
    v0_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    v1_smem = gl.allocate_shared_memory(dtype, [BKW, D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [SLOTS, BQ, D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [SLOTS, BQ, D], do_desc.layout)
    ds0 = gl.allocate_shared_memory(dtype, [2, BKW, BQ], ds_layout)
    ds1 = gl.allocate_shared_memory(dtype, [2, BKW, BQ], ds_layout)
    if DQ_MODE == 2:  # K's column halves; [BQ, D / 2] staging tiles
        kh_smem = gl.allocate_shared_memory(dtype, [4, BKW, DH], kh_desc.layout)
        dq0_smem = gl.allocate_shared_memory(gl.float32, [BQ, DH], dqh_desc.layout)
        dq1_smem = gl.allocate_shared_memory(gl.float32, [BQ, DH], dqh_desc.layout)
    else:  # kh_smem unused (a token allocation keeps one signature)
        kh_smem = gl.allocate_shared_memory(dtype, [1, 8, DH], kh_desc.layout)
        dq0_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
        dq1_smem = gl.allocate_shared_memory(gl.float32, [BQ, D], dq_desc.layout)
    return b, k0, k0_smem, k1_smem, v0_smem, v1_smem, q_ring, do_ring, ds0, ds1, kh_smem, dq0_smem, dq1_smem


@gluon.jit
def bwd_ws2_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, kh_desc, dqh_desc, l2_ptr, delta_ptr, dk_ptr, dv_ptr, B,
                   NQ, NK, qk_scale_log2, scale, IS_CAUSAL: gl.constexpr, DQ_MODE: gl.constexpr, SLOTS: gl.constexpr,
                   GROUP: gl.constexpr, CONSUMER_REGS: gl.constexpr, KV_REGS: gl.constexpr = 0):
    """dK, dV of one 128-key tile (2 * BKW, BKW = k_desc's block rows) of one batch element; dQ shares
    reduce-added into the fp32 buffer of dq_desc (block [BQ, D]) / dqh_desc (block [BQ, D / 2], mode 2).
    kh_desc: K with block [BKW, D / 2] (mode 2). Grid: GROUP == 0: (B, cdiv(NK, 2 * BKW)); GROUP > 0:
    (GROUP, cdiv(NK, 2 * BKW), B // GROUP), GROUP dividing B (CTAs start in x, y, z order, so
    GROUP batch elements' key tiles run together). Launch with num_warps=4 and maxnreg 168."""
    BQ: gl.constexpr = q_desc.block_type.shape[0]
    BKW: gl.constexpr = k_desc.block_type.shape[0]
    (b, k0, k0_smem, k1_smem, v0_smem, v1_smem, q_ring, do_ring, ds0, ds1, kh_smem, dq0_smem,
     dq1_smem) = _ws2_buffers(q_desc, k_desc, v_desc, do_desc, dq_desc, kh_desc, dqh_desc, DQ_MODE, SLOTS, GROUP)
    row0q = b * NQ
    row0k = b * NK
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    dq_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # mode 0: full, free
    ds_full = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # modes 1, 2: [2 c + b]
    ds_free = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(SLOTS):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # two consumers release each slot
    for c in gl.static_range(2):
        mbarrier.init(dq_bars.index(c), count=1)
    for c in gl.static_range(4):
        mbarrier.init(ds_full.index(c), count=1)
        mbarrier.init(ds_free.index(c), count=1)

    if IS_CAUSAL:
        q_start = (k0 // BQ) * BQ
    else:
        q_start = 0
    n_steps = gl.cdiv(NQ - q_start, BQ)
    gl.warp_specialize([
        (_ws2_consumer, (k0_smem, k1_smem, v0_smem, kh_smem, q_ring, do_ring, ds0, ds1, (dq0_smem, dq1_smem),
                         (dq0_smem, dq1_smem), kv_bar, ready, empty, dq_bars, ds_full, ds_free, dq_desc, dqh_desc,
                         l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0, q_start, n_steps, NQ, NK, qk_scale_log2,
                         scale, IS_CAUSAL, DQ_MODE, SLOTS, KV_REGS, 0)),
        (_ws2_loader, (q_desc, k_desc, v_desc, do_desc, kh_desc, k0_smem, k1_smem, v0_smem, v1_smem, kh_smem, q_ring,
                       do_ring, kv_bar, ready, empty, row0q, row0k, k0, q_start, n_steps, SLOTS, DQ_MODE)),
        (_ws2_consumer, (k1_smem, k0_smem, v1_smem, kh_smem, q_ring, do_ring, ds1, ds0, (dq0_smem, dq1_smem),
                         (dq0_smem, dq1_smem), kv_bar, ready, empty, dq_bars, ds_full, ds_free, dq_desc, dqh_desc,
                         l2_ptr, delta_ptr, dk_ptr, dv_ptr, row0q, row0k, k0 + BKW, q_start, n_steps, NQ, NK,
                         qk_scale_log2, scale, IS_CAUSAL, DQ_MODE, SLOTS, KV_REGS, 1)),
    ], [1, 4], [24, CONSUMER_REGS])
