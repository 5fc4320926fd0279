"""FlashAttention-2 in Triton (§2.4 forward, §2.5 backward): the reference solution.

Read ``flash_attention_pytorch.py`` first: each forward program here runs that file's inner
loop for one query tile of one batch element. File order: ``@triton.jit`` kernels, then the
launchers that pick tile sizes and grids, then the ``autograd.Function``.

Why it is fast (counted at batch B, sequence N, head dim d, causal, 2-byte dtype):
naive attention writes and re-reads the (N, N) score and probability matrices, about
``8 B N^2`` bytes each way; this forward reads Q, K, V and writes O and L, about
``8 B N d`` bytes plus re-reads of K and V that stay in L2. Its work is the causal half of
the two matrix products, ``2 B N^2 d`` FLOP (the full ``4 B N^2 d`` halved); the backward is
about 2.5 times that (five products instead of two). The kernels therefore
* skip key tiles that lie wholly above the diagonal (half the work, exactly: masked
  probabilities are exp(-1e6 - ...) = 0 in float32),
* apply masks only on the few tiles that need them (the diagonal and the ragged last tile),
  and run the rest of the loop mask-free,
* use ``exp2`` with ``scale * log2(e)`` folded into one multiply,
* keep the running max, sum and accumulator in float32,
* run the backward without atomics, in two launches: the dQ kernel owns a query tile and
  accumulates its dQ over key tiles (and writes Delta = rowsum(O * dO), which FlashAttention-2
  computes in a pass of its own); then the dK/dV kernel owns a key tile and accumulates its
  dK, dV over query tiles.

Contract and masking are those of ``flash_attention_pytorch.py`` (see its docstring): L is the
natural-log logsumexp in float32; query i sees key j when j <= i; no row is ever fully masked.
Under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) bfloat16 ``tl.dot`` gives wrong
answers in triton 3.6, so there the kernels upcast dot operands to float32 (``UPCAST_DOTS``).
Float32 inputs use tf32x3 dots (``F32_DOTS``): each product is three tf32 tensor-core products
(the operands split into a high and a low tf32 part), which keeps float32's accuracy where one
tf32 product would round Q and K to 10 mantissa bits. IEEE dots (``input_precision="ieee"``,
CUDA cores) are as accurate but took 25-110 s to compile per kernel at d = 128, which made a
full GPU grade of this reference wait on its float32 kernels (benchmarks/NOTES.md).

Every kernel runs on a (batch, tiles) grid, batch fastest: the GPU starts programs in index
order, so with a causal mask every batch element's heaviest tile starts before any lighter one.

Measured on an H200 at the leaderboard shape (16, 16384, 64) bfloat16 causal, called through
``torch.compile`` (2026-12-02): forward 1.32 ms, forward+backward 4.75 ms (SDPA's flash backend
6.98 ms, cuDNN 4.42 ms, same run; 4.86-4.88 ms under the leaderboard's 10 s timing).
benchmarks/NOTES.md has the floor, the tuning and what did not help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from cs336_systems.flash_attention_inputs import SUPPORTED_HEAD_DIMS, TRITON_INTERPRET, check_flash_attention_inputs

LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * log2(e))
LN2 = tl.constexpr(0.6931471805599453)  # log(x) = log2(x) * ln(2)
MASK_VALUE_LOG2 = tl.constexpr(-1e6 * 1.4426950408889634)  # the contract's -1e6, in log2 units


# ======================================================================================
# Kernels
# ======================================================================================


@triton.jit
def _dot(a, b, acc, F32_DOTS: tl.constexpr):
    """acc + a @ b, accumulated in float32 (acc may be None); float32-accurate tf32x3 products for float32 inputs."""
    if F32_DOTS:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _fwd_key_tile(
    q, k, v, m_i, l_i, acc, qk_scale, offs_q, offs_k, N_KEYS,
    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, F32_DOTS: tl.constexpr,
):
    """Fold one key tile into the running (max m_i, sum l_i, accumulator acc) of a query tile.

    Scores are kept in log2 units (s = q.k * scale * log2 e) so that exp2 can be used.
    MASKED tiles get the causal -1e6 where key > query and -inf for keys past N_KEYS (padding,
    which must weigh exactly nothing); unmasked tiles are known to need neither, and there the
    scaling and the max subtraction fuse into one multiply-add per score.
    """
    qk = _dot(q, tl.trans(k), None, F32_DOTS)  # (Bq, Bk) raw scores
    if MASKED:
        s = qk * qk_scale
        if IS_CAUSAL:
            s = tl.where(offs_k[None, :] > offs_q[:, None], s + MASK_VALUE_LOG2, s)
        s = tl.where(offs_k[None, :] < N_KEYS, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # (Bq,)
        p = tl.math.exp2(s - m_new[:, None])  # (Bq, Bk)
    else:
        m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)  # scale > 0, so max commutes with it
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])

    # -- rescale the old sum and accumulator, add this tile --
    alpha = tl.math.exp2(m_i - m_new)  # (Bq,)  0 on the first tile (m_i = -inf)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], F32_DOTS)  # (Bq, D)
    return m_new, l_i, acc


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
    F32_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
):
    """One program: one query tile of one batch element. Grid (cdiv(N_QUERIES, Q_TILE_SIZE), batch).

    Writes O[b, tile] (in O's dtype) and L[b, tile] = m + log(l) (float32, natural log).
    """
    # Grid (batch, tiles), batch fastest: programs start in index order, so (causal) every batch
    # element's heaviest tile starts before any lighter one: heaviest-first over the whole grid.
    q_tile = tl.program_id(1)
    if IS_CAUSAL:  # later query tiles see more keys
        q_tile = tl.num_programs(1) - 1 - q_tile
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
    q_start = q_tile * Q_TILE_SIZE
    offs_q = q_start + tl.arange(0, Q_TILE_SIZE)  # (Bq,) query indices
    offs_k = tl.arange(0, K_TILE_SIZE)  # (Bk,) key offsets within a tile
    offs_d = tl.arange(0, D)
    q_in = offs_q[:, None] < N_QUERIES  # (Bq, 1) padding rows of the last tile are not stored

    q = tl.load(Q_ptr + b * stride_qb + offs_q[:, None] * stride_qq + offs_d[None, :] * stride_qd, mask=q_in, other=0.0)
    k_ptrs = K_ptr + b * stride_kb + offs_k[:, None] * stride_kk + offs_d[None, :] * stride_kd  # (Bk, D)
    v_ptrs = V_ptr + b * stride_vb + offs_k[:, None] * stride_vk + offs_d[None, :] * stride_vd  # (Bk, D)
    if UPCAST_DOTS:
        q = q.to(tl.float32)

    m_i = tl.full([Q_TILE_SIZE], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([Q_TILE_SIZE], dtype=tl.float32)
    acc = tl.zeros([Q_TILE_SIZE, D], dtype=tl.float32)
    # torch.compile passes Python floats as float64: without this cast the scores, and then the
    # accumulator, would be promoted to float64 (and tl.dot rejects a float64 accumulator).
    scale = tl.cast(scale, tl.float32)
    qk_scale = scale * LOG2E

    # Key tiles [0, full_end) are whole and wholly visible: no masks at all.
    # Key tiles [full_end, stop) need the key-bounds mask and, if causal, the diagonal mask.
    # Causal: keys >= q_start + Q_TILE_SIZE are masked for every row here, so they are skipped.
    if IS_CAUSAL:
        stop = tl.minimum(N_KEYS, q_start + Q_TILE_SIZE)
        full_end = (tl.minimum(q_start, N_KEYS) // K_TILE_SIZE) * K_TILE_SIZE
    else:
        stop = N_KEYS
        full_end = (N_KEYS // K_TILE_SIZE) * K_TILE_SIZE

    for k_start in range(0, full_end, K_TILE_SIZE):
        k = tl.load(k_ptrs + k_start * stride_kk)
        v = tl.load(v_ptrs + k_start * stride_vk)
        if UPCAST_DOTS:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        m_i, l_i, acc = _fwd_key_tile(
            q, k, v, m_i, l_i, acc, qk_scale, offs_q, k_start + offs_k, N_KEYS,
            IS_CAUSAL=IS_CAUSAL, MASKED=False, F32_DOTS=F32_DOTS,
        )
    for k_start in range(full_end, stop, K_TILE_SIZE):
        k_in = (k_start + offs_k)[:, None] < N_KEYS  # (Bk, 1)
        k = tl.load(k_ptrs + k_start * stride_kk, mask=k_in, other=0.0)
        v = tl.load(v_ptrs + k_start * stride_vk, mask=k_in, other=0.0)
        if UPCAST_DOTS:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        m_i, l_i, acc = _fwd_key_tile(
            q, k, v, m_i, l_i, acc, qk_scale, offs_q, k_start + offs_k, N_KEYS,
            IS_CAUSAL=IS_CAUSAL, MASKED=True, F32_DOTS=F32_DOTS,
        )

    # -- normalise and write O and the natural-log logsumexp --
    o = acc / l_i[:, None]  # (Bq, D)
    lse = (m_i + tl.math.log2(l_i)) * LN2  # (Bq,)
    o_ptrs = O_ptr + b * stride_ob + offs_q[:, None] * stride_oq + offs_d[None, :] * stride_od
    tl.store(o_ptrs, o.to(O_ptr.dtype.element_ty), mask=q_in)
    tl.store(L_ptr + b * stride_lb + offs_q * stride_lq, lse, mask=offs_q < N_QUERIES)


@triton.jit
def _load_row_stats(Stats_ptr, offs_q, N_QUERIES, MASKED: tl.constexpr, PAIRED: tl.constexpr):
    """(L * log2 e, Delta) of the queries offs_q from a batch element's statistics; 0 past N_QUERIES
    when MASKED. PAIRED: the statistics are (Nq, 2) rows, and each query's pair loads as one
    8-byte element (at d = 64 the dK/dV loop then has 298 instructions per tile instead of 327,
    and runs 10% faster). Otherwise they are two planes (2, Nq), read by two unit-stride loads:
    at d = 128 any strided or paired load made ptxas serialise the kernel's wgmmas (C7515)."""
    q_in = offs_q < N_QUERIES
    if PAIRED:
        pairs = Stats_ptr + offs_q[:, None] * 2 + tl.arange(0, 2)[None, :]  # (Bq, 2)
        if MASKED:
            stats = tl.load(pairs, mask=q_in[:, None], other=0.0)
        else:
            stats = tl.load(pairs)
        lse2, delta = tl.split(stats)  # (Bq,) each
    else:
        if MASKED:
            lse2 = tl.load(Stats_ptr + offs_q, mask=q_in, other=0.0)
            delta = tl.load(Stats_ptr + N_QUERIES + offs_q, mask=q_in, other=0.0)
        else:
            lse2 = tl.load(Stats_ptr + offs_q)
            delta = tl.load(Stats_ptr + N_QUERIES + offs_q)
    return lse2, delta


@triton.jit
def _bwd_dkdv_query_tile(
    k, v, dk, dv, q_start, offs_k,
    Q_ptr, dO_ptr, Stats_ptr,
    stride_qq, stride_qd, stride_doq, stride_dod,
    N_QUERIES, qk_scale,
    D: tl.constexpr, Q_TILE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, F32_DOTS: tl.constexpr, UPCAST_DOTS: tl.constexpr,
    PAIRED_STATS: tl.constexpr,
):
    """Add one query tile's share to dK and dV of a key tile, working in transposed form
    (rows = keys) so that every product is a plain tl.dot: P^T = exp2(K Q^T * scale * log2 e - L * log2 e).
    Stats_ptr: the batch element's row statistics from the dQ kernel (see ``_load_row_stats``)."""
    offs_q = q_start + tl.arange(0, Q_TILE_SIZE)
    offs_d = tl.arange(0, D)
    q_ptrs = Q_ptr + offs_q[:, None] * stride_qq + offs_d[None, :] * stride_qd
    do_ptrs = dO_ptr + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod
    if MASKED:
        q_in = offs_q < N_QUERIES
        q = tl.load(q_ptrs, mask=q_in[:, None], other=0.0)
        do = tl.load(do_ptrs, mask=q_in[:, None], other=0.0)
    else:
        q = tl.load(q_ptrs)
        do = tl.load(do_ptrs)
    lse2, delta = _load_row_stats(Stats_ptr, offs_q, N_QUERIES, MASKED=MASKED, PAIRED=PAIRED_STATS)
    if UPCAST_DOTS:
        q = q.to(tl.float32)
        do = do.to(tl.float32)

    # -- recompute P^T from the saved logsumexp --
    s_t = _dot(k, tl.trans(q), None, F32_DOTS) * qk_scale  # (Bk, Bq) log2 units
    dp_t = _dot(v, tl.trans(do), None, F32_DOTS)  # (Bk, Bq) dP^T = V dO^T, needs no P
    p_t = tl.math.exp2(s_t - lse2[None, :])  # (Bk, Bq)
    if MASKED:
        visible = offs_q[None, :] < N_QUERIES
        if IS_CAUSAL:
            visible = visible & (offs_k[:, None] <= offs_q[None, :])
        p_t = tl.where(visible, p_t, 0.0)

    # -- dV += P^T dO;  dS^T = P^T * (dP^T - Delta);  dK += dS^T Q (scaled by the caller) --
    dv = _dot(p_t.to(do.dtype), do, dv, F32_DOTS)  # (Bk, D)
    ds_t = p_t * (dp_t - delta[None, :])  # (Bk, Bq)
    dk = _dot(ds_t.to(q.dtype), q, dk, F32_DOTS)  # (Bk, D)
    return dk, dv


@triton.jit
def flash_bwd_dkdv_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, Stats_ptr, dK_ptr, dV_ptr,
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_dob, stride_doq, stride_dod,
    stride_statsb,
    stride_dkb, stride_dkk, stride_dkd,
    stride_dvb, stride_dvk, stride_dvd,
    N_QUERIES, N_KEYS,
    scale,
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    F32_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
    PAIRED_STATS: tl.constexpr = True,
):
    """One program: dK and dV of one key tile of one batch element, summed over query tiles.
    Grid (cdiv(N_KEYS, K_TILE_SIZE), batch). No two programs write the same element: no atomics.
    Reads the row statistics the dQ kernel writes (L * log2 e and Delta, see ``_load_row_stats``)."""
    # Grid (batch, tiles), batch fastest (see the forward): causal, the first key tiles are the heaviest.
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
    k_start = tl.program_id(1) * K_TILE_SIZE
    offs_k = k_start + tl.arange(0, K_TILE_SIZE)
    offs_d = tl.arange(0, D)
    k_in = offs_k[:, None] < N_KEYS
    k = tl.load(K_ptr + b * stride_kb + offs_k[:, None] * stride_kk + offs_d[None, :] * stride_kd, mask=k_in, other=0.0)
    v = tl.load(V_ptr + b * stride_vb + offs_k[:, None] * stride_vk + offs_d[None, :] * stride_vd, mask=k_in, other=0.0)
    if UPCAST_DOTS:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([K_TILE_SIZE, D], dtype=tl.float32)
    dv = tl.zeros([K_TILE_SIZE, D], dtype=tl.float32)
    # torch.compile passes Python floats as float64: without this cast the scores, and then the
    # accumulator, would be promoted to float64 (and tl.dot rejects a float64 accumulator).
    scale = tl.cast(scale, tl.float32)
    qk_scale = scale * LOG2E
    Q_ptr += b * stride_qb
    dO_ptr += b * stride_dob
    Stats_ptr += b * stride_statsb

    # Query tiles: [diag_end, full_end) are whole and wholly below the diagonal (no masks),
    # [start, diag_end) cross it (masked), [tail_start, N_QUERIES) is the ragged last tile.
    # The loop order is chosen for ptxas, not for the math (the sum is the same in any order):
    # causal runs the mask-free loop first, non-causal the tail first. With the other orders
    # ptxas serialises every wgmma of the kernel on sm_90 ("C7515: wgmma.mma_async instructions
    # are serialized due to non wgmma instructions defining accumulator registers"; still so at
    # d = 128, though no longer at d = 64 with the paired statistics load), and the tensor cores
    # stop overlapping the exponentials. benchmarks/NOTES.md has the timings.
    # Causal: query tiles ending before k_start see none of these keys and are skipped; keys
    # with k_start >= N_QUERIES are seen by no query, and all three ranges come out empty.
    if IS_CAUSAL:
        start = (k_start // Q_TILE_SIZE) * Q_TILE_SIZE
        diag_end = tl.maximum(start, tl.cdiv(tl.minimum(k_start + K_TILE_SIZE, N_QUERIES), Q_TILE_SIZE) * Q_TILE_SIZE)
    else:
        start = 0
        diag_end = 0
    full_end = (N_QUERIES // Q_TILE_SIZE) * Q_TILE_SIZE
    tail_start = tl.maximum(diag_end, full_end)

    if not IS_CAUSAL:
        for q_start in range(tail_start, N_QUERIES, Q_TILE_SIZE):
            dk, dv = _bwd_dkdv_query_tile(
                k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr,
                stride_qq, stride_qd, stride_doq, stride_dod, N_QUERIES, qk_scale,
                D=D, Q_TILE_SIZE=Q_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=True, F32_DOTS=F32_DOTS,
                UPCAST_DOTS=UPCAST_DOTS, PAIRED_STATS=PAIRED_STATS,
            )
    for q_start in range(diag_end, full_end, Q_TILE_SIZE):
        dk, dv = _bwd_dkdv_query_tile(
            k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr,
            stride_qq, stride_qd, stride_doq, stride_dod, N_QUERIES, qk_scale,
            D=D, Q_TILE_SIZE=Q_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=False, F32_DOTS=F32_DOTS,
            UPCAST_DOTS=UPCAST_DOTS, PAIRED_STATS=PAIRED_STATS,
        )
    if IS_CAUSAL:
        for q_start in range(start, diag_end, Q_TILE_SIZE):
            dk, dv = _bwd_dkdv_query_tile(
                k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr,
                stride_qq, stride_qd, stride_doq, stride_dod, N_QUERIES, qk_scale,
                D=D, Q_TILE_SIZE=Q_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=True, F32_DOTS=F32_DOTS,
                UPCAST_DOTS=UPCAST_DOTS, PAIRED_STATS=PAIRED_STATS,
            )
        for q_start in range(tail_start, N_QUERIES, Q_TILE_SIZE):
            dk, dv = _bwd_dkdv_query_tile(
                k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr,
                stride_qq, stride_qd, stride_doq, stride_dod, N_QUERIES, qk_scale,
                D=D, Q_TILE_SIZE=Q_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=True, F32_DOTS=F32_DOTS,
                UPCAST_DOTS=UPCAST_DOTS, PAIRED_STATS=PAIRED_STATS,
            )

    dk = dk * scale  # dS = P * (dP - Delta) is the gradient of the scaled scores
    tl.store(dK_ptr + b * stride_dkb + offs_k[:, None] * stride_dkk + offs_d[None, :] * stride_dkd,
             dk.to(dK_ptr.dtype.element_ty), mask=k_in)
    tl.store(dV_ptr + b * stride_dvb + offs_k[:, None] * stride_dvk + offs_d[None, :] * stride_dvd,
             dv.to(dV_ptr.dtype.element_ty), mask=k_in)


@triton.jit
def _bwd_dq_key_tile(
    q, do, lse, delta, dq, k_start, offs_q,
    K_ptr, V_ptr, stride_kk, stride_kd, stride_vk, stride_vd,
    N_KEYS, qk_scale,
    D: tl.constexpr, K_TILE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, F32_DOTS: tl.constexpr, UPCAST_DOTS: tl.constexpr,
):
    """Add one key tile's share to dQ of a query tile: dQ += (P * (dO V^T - Delta)) K (scaled by the caller)."""
    offs_k = k_start + tl.arange(0, K_TILE_SIZE)
    offs_d = tl.arange(0, D)
    k_ptrs = K_ptr + offs_k[:, None] * stride_kk + offs_d[None, :] * stride_kd
    v_ptrs = V_ptr + offs_k[:, None] * stride_vk + offs_d[None, :] * stride_vd
    if MASKED:
        k_in = offs_k[:, None] < N_KEYS
        k = tl.load(k_ptrs, mask=k_in, other=0.0)
        v = tl.load(v_ptrs, mask=k_in, other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    if UPCAST_DOTS:
        k = k.to(tl.float32)
        v = v.to(tl.float32)

    s = _dot(q, tl.trans(k), None, F32_DOTS) * qk_scale  # (Bq, Bk) log2 units
    dp = _dot(do, tl.trans(v), None, F32_DOTS)  # (Bq, Bk) dP = dO V^T, needs no P
    p = tl.math.exp2(s - lse[:, None])  # (Bq, Bk)  lse already in log2 units
    if MASKED:
        visible = offs_k[None, :] < N_KEYS
        if IS_CAUSAL:
            visible = visible & (offs_k[None, :] <= offs_q[:, None])
        p = tl.where(visible, p, 0.0)
    ds = p * (dp - delta[:, None])  # (Bq, Bk)
    dq = _dot(ds.to(k.dtype), k, dq, F32_DOTS)  # (Bq, D)
    return dq


@triton.jit
def flash_bwd_dq_kernel(
    Q_ptr, K_ptr, V_ptr, O_ptr, dO_ptr, L_ptr, Stats_ptr, dQ_ptr,
    stride_qb, stride_qq, stride_qd,
    stride_kb, stride_kk, stride_kd,
    stride_vb, stride_vk, stride_vd,
    stride_ob, stride_oq, stride_od,
    stride_dob, stride_doq, stride_dod,
    stride_lb, stride_lq,
    stride_statsb,
    stride_dqb, stride_dqq, stride_dqd,
    N_QUERIES, N_KEYS,
    scale,
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    F32_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
    PAIRED_STATS: tl.constexpr = True,
):
    """One program: dQ of one query tile of one batch element, summed over key tiles.
    Grid (cdiv(N_QUERIES, Q_TILE_SIZE), batch); key tiles are visited as in the forward.

    It runs before the dK/dV kernel and also writes, for its rows, what that kernel needs:
    L * log2 e and Delta = rowsum(O * dO) (= rowsum(P * dP)), float32, into Stats: (B, Nq, 2) rows
    if PAIRED_STATS, else (B, 2, Nq) planes, contiguous either way (see ``_load_row_stats``).
    This saves the separate Delta pass FlashAttention-2 launches first."""
    # Grid (batch, tiles), batch fastest: programs start in index order, so (causal) every batch
    # element's heaviest tile starts before any lighter one: heaviest-first over the whole grid.
    q_tile = tl.program_id(1)
    if IS_CAUSAL:  # later query tiles see more keys
        q_tile = tl.num_programs(1) - 1 - q_tile
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
    q_start = q_tile * Q_TILE_SIZE
    offs_q = q_start + tl.arange(0, Q_TILE_SIZE)
    offs_d = tl.arange(0, D)
    q_in = offs_q < N_QUERIES
    q = tl.load(Q_ptr + b * stride_qb + offs_q[:, None] * stride_qq + offs_d[None, :] * stride_qd, mask=q_in[:, None], other=0.0)
    do = tl.load(dO_ptr + b * stride_dob + offs_q[:, None] * stride_doq + offs_d[None, :] * stride_dod, mask=q_in[:, None], other=0.0)
    o = tl.load(O_ptr + b * stride_ob + offs_q[:, None] * stride_oq + offs_d[None, :] * stride_od, mask=q_in[:, None], other=0.0)
    lse = tl.load(L_ptr + b * stride_lb + offs_q * stride_lq, mask=q_in, other=0.0) * LOG2E
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)  # (Bq,)
    Stats_ptr += b * stride_statsb
    if PAIRED_STATS:  # (Nq, 2) rows
        tl.store(Stats_ptr + offs_q[:, None] * 2 + tl.arange(0, 2)[None, :], tl.join(lse, delta), mask=q_in[:, None])
    else:  # (2, Nq) planes
        tl.store(Stats_ptr + offs_q, lse, mask=q_in)
        tl.store(Stats_ptr + N_QUERIES + offs_q, delta, mask=q_in)
    if UPCAST_DOTS:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    dq = tl.zeros([Q_TILE_SIZE, D], dtype=tl.float32)
    # torch.compile passes Python floats as float64: without this cast the scores, and then the
    # accumulator, would be promoted to float64 (and tl.dot rejects a float64 accumulator).
    scale = tl.cast(scale, tl.float32)
    qk_scale = scale * LOG2E
    K_ptr += b * stride_kb
    V_ptr += b * stride_vb

    if IS_CAUSAL:
        stop = tl.minimum(N_KEYS, q_start + Q_TILE_SIZE)
        full_end = (tl.minimum(q_start, N_KEYS) // K_TILE_SIZE) * K_TILE_SIZE
    else:
        stop = N_KEYS
        full_end = (N_KEYS // K_TILE_SIZE) * K_TILE_SIZE
    for k_start in range(0, full_end, K_TILE_SIZE):
        dq = _bwd_dq_key_tile(
            q, do, lse, delta, dq, k_start, offs_q, K_ptr, V_ptr, stride_kk, stride_kd, stride_vk, stride_vd,
            N_KEYS, qk_scale, D=D, K_TILE_SIZE=K_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=False,
            F32_DOTS=F32_DOTS, UPCAST_DOTS=UPCAST_DOTS,
        )
    for k_start in range(full_end, stop, K_TILE_SIZE):
        dq = _bwd_dq_key_tile(
            q, do, lse, delta, dq, k_start, offs_q, K_ptr, V_ptr, stride_kk, stride_kd, stride_vk, stride_vd,
            N_KEYS, qk_scale, D=D, K_TILE_SIZE=K_TILE_SIZE, IS_CAUSAL=IS_CAUSAL, MASKED=True,
            F32_DOTS=F32_DOTS, UPCAST_DOTS=UPCAST_DOTS,
        )

    dq = dq * scale
    tl.store(dQ_ptr + b * stride_dqb + offs_q[:, None] * stride_dqq + offs_d[None, :] * stride_dqd,
             dq.to(dQ_ptr.dtype.element_ty), mask=q_in[:, None])


# ======================================================================================
# Launchers
# ======================================================================================


@dataclass(frozen=True)
class TileConfig:
    """Launch parameters of one kernel: tile sizes (rows of Q and of K per tile), warps, pipeline depth."""

    q_tile: int
    k_tile: int
    num_warps: int = 4
    num_stages: int = 2


# Under the interpreter every tl operation is a NumPy call: larger tiles mean fewer of them.
_INTERPRETER_CONFIG = TileConfig(64, 64)


def forward_config(d: int, dtype: torch.dtype) -> TileConfig:
    """Tile sizes for the forward kernel at head dim d.

    The 16-bit d <= 64 entry won a timing on an H200 (benchmarks/NOTES.md); the d = 128 and float32
    entries are untimed choices that fit in shared memory. Any entry is correct: only speed depends on it.
    """
    if TRITON_INTERPRET:
        return _INTERPRETER_CONFIG
    if dtype == torch.float32:
        return TileConfig(64, 32, num_warps=4, num_stages=2)
    if d <= 64:
        return TileConfig(128, 64, num_warps=8, num_stages=3)
    return TileConfig(128, 64, num_warps=8, num_stages=2)


def backward_configs(d: int, dtype: torch.dtype) -> tuple[TileConfig, TileConfig]:
    """(dK/dV kernel config, dQ kernel config) at head dim d; timed as ``forward_config`` says.

    A new dK/dV config must keep ptxas from serialising the kernel's wgmmas (``ptxas -v`` prints
    C7515) and from spilling: benchmarks/NOTES.md says how to check both offline."""
    if TRITON_INTERPRET:
        return _INTERPRETER_CONFIG, _INTERPRETER_CONFIG
    if dtype == torch.float32:
        return TileConfig(32, 64, num_warps=4, num_stages=2), TileConfig(64, 32, num_warps=4, num_stages=2)
    if d <= 64:
        return TileConfig(64, 64, num_warps=4, num_stages=3), TileConfig(64, 128, num_warps=4, num_stages=3)
    return TileConfig(32, 128, num_warps=8, num_stages=2), TileConfig(128, 32, num_warps=8, num_stages=2)


def paired_stats_load(d: int) -> bool:
    """Whether the dK/dV kernel loads each query's (L * log2 e, Delta) as one pair (see
    ``_load_row_stats``): yes at d <= 64, where it is faster; no at d = 128, where ptxas would
    serialise the kernel's wgmmas. benchmarks/ptxas_report.py compiles with the same choice."""
    return d <= 64


def _dot_flags(dtype: torch.dtype) -> dict[str, bool]:
    return {
        "F32_DOTS": dtype == torch.float32,
        "UPCAST_DOTS": TRITON_INTERPRET and dtype == torch.bfloat16,
    }


MAX_GRID_TILES = 65535  # a CUDA grid's second (and third) axis holds at most this many programs


def _tiles(n: int, tile: int, what: str) -> int:
    """The grid's tile count for a sequence of ``n`` (its second axis: batch runs fastest, see
    the kernels); ValueError naming the limit when it is longer than a grid can hold."""
    tiles = triton.cdiv(n, tile)
    if tiles > MAX_GRID_TILES:
        raise ValueError(f"{what}={n} needs {tiles} tiles of {tile}, but a CUDA grid holds at most "
                         f"{MAX_GRID_TILES} along the tile axis; split the sequence into chunks of at most "
                         f"{MAX_GRID_TILES * tile} tokens")
    return tiles


def _check_int32_offsets(**tensors: torch.Tensor) -> None:
    """Raise ValueError if an offset inside one batch element would overflow the kernels' int32 index math."""
    for name, t in tensors.items():
        extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape[1:], t.stride()[1:]))
        if extent >= 2**31:
            raise ValueError(
                f"{name} {tuple(t.shape)} with strides {t.stride()} spans {extent} elements per batch entry, "
                "more than the kernels' int32 offsets reach (2**31); split the sequence or the batch"
            )


def _static_head_dim(d) -> int:
    """d as a plain int. Under torch.compile with dynamic shapes d can arrive symbolic; the kernels
    need it as a constant twice over: D is a tl.constexpr, and scale = 1/sqrt(d) must be a plain
    float (a symbolic float argument breaks the compiled kernel call). Comparing with each
    supported size makes torch.compile specialise on the one that matches."""
    for supported in SUPPORTED_HEAD_DIMS:
        if d == supported:
            return supported
    raise ValueError(f"head dim d={d} is not supported; use one of {SUPPORTED_HEAD_DIMS}")


def flash_forward_triton(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool, config: TileConfig | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel. Q (B, Nq, d), K and V (B, Nk, d), any strides.

    Returns O (B, Nq, d) in Q's dtype and L (B, Nq) float32 (natural-log logsumexp).
    """
    batch, n_queries, _ = Q.shape
    n_keys = K.shape[1]
    d = _static_head_dim(Q.shape[2])
    _check_int32_offsets(Q=Q, K=K, V=V)
    cfg = config or forward_config(d, Q.dtype)
    O = torch.empty((batch, n_queries, d), device=Q.device, dtype=Q.dtype)  # (B, Nq, d)
    L = torch.empty((batch, n_queries), device=Q.device, dtype=torch.float32)  # (B, Nq)
    grid = (batch, _tiles(n_queries, cfg.q_tile, "n_queries"))
    flash_fwd_kernel[grid](
        Q, K, V, O, L,
        Q.stride(0), Q.stride(1), Q.stride(2),
        K.stride(0), K.stride(1), K.stride(2),
        V.stride(0), V.stride(1), V.stride(2),
        O.stride(0), O.stride(1), O.stride(2),
        L.stride(0), L.stride(1),
        n_queries, n_keys,
        1.0 / math.sqrt(d),
        D=d, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile, IS_CAUSAL=is_causal,
        **_dot_flags(Q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return O, L


def launch_bwd_dkdv(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, dO: torch.Tensor, stats: torch.Tensor,
    is_causal: bool, config: TileConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dK, dV (B, Nk, d) in K's and V's dtype, one program per key tile; stats from ``launch_bwd_dq``."""
    batch, n_queries, _ = Q.shape
    n_keys = K.shape[1]
    d = _static_head_dim(Q.shape[2])
    dK = torch.empty((batch, n_keys, d), device=K.device, dtype=K.dtype)  # (B, Nk, d)
    dV = torch.empty((batch, n_keys, d), device=V.device, dtype=V.dtype)  # (B, Nk, d)
    flash_bwd_dkdv_kernel[(batch, _tiles(n_keys, config.k_tile, "n_keys"))](
        Q, K, V, dO, stats, dK, dV,
        Q.stride(0), Q.stride(1), Q.stride(2),
        K.stride(0), K.stride(1), K.stride(2),
        V.stride(0), V.stride(1), V.stride(2),
        dO.stride(0), dO.stride(1), dO.stride(2),
        stats.stride(0),
        dK.stride(0), dK.stride(1), dK.stride(2),
        dV.stride(0), dV.stride(1), dV.stride(2),
        n_queries, n_keys, 1.0 / math.sqrt(d),
        D=d, Q_TILE_SIZE=config.q_tile, K_TILE_SIZE=config.k_tile, IS_CAUSAL=is_causal, **_dot_flags(Q.dtype),
        PAIRED_STATS=paired_stats_load(d), num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return dK, dV


def launch_bwd_dq(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, O: torch.Tensor, dO: torch.Tensor, L: torch.Tensor,
    is_causal: bool, config: TileConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ (B, Nq, d) in Q's dtype, stats), one program per query tile.

    stats: float32 L * log2(e) and rowsum(O * dO) per query, the dK/dV kernel's input; (B, Nq, 2)
    if ``paired_stats_load(d)``, else (B, 2, Nq)."""
    batch, n_queries, _ = Q.shape
    n_keys = K.shape[1]
    d = _static_head_dim(Q.shape[2])
    dQ = torch.empty((batch, n_queries, d), device=Q.device, dtype=Q.dtype)  # (B, Nq, d)
    paired = paired_stats_load(d)
    stats = torch.empty((batch, n_queries, 2) if paired else (batch, 2, n_queries), device=Q.device, dtype=torch.float32)
    flash_bwd_dq_kernel[(batch, _tiles(n_queries, config.q_tile, "n_queries"))](
        Q, K, V, O, dO, L, stats, dQ,
        Q.stride(0), Q.stride(1), Q.stride(2),
        K.stride(0), K.stride(1), K.stride(2),
        V.stride(0), V.stride(1), V.stride(2),
        O.stride(0), O.stride(1), O.stride(2),
        dO.stride(0), dO.stride(1), dO.stride(2),
        L.stride(0), L.stride(1),
        stats.stride(0),
        dQ.stride(0), dQ.stride(1), dQ.stride(2),
        n_queries, n_keys, 1.0 / math.sqrt(d),
        D=d, Q_TILE_SIZE=config.q_tile, K_TILE_SIZE=config.k_tile, IS_CAUSAL=is_causal, **_dot_flags(Q.dtype),
        PAIRED_STATS=paired,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return dQ, stats


def flash_backward_triton(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    O: torch.Tensor,
    dO: torch.Tensor,
    L: torch.Tensor,
    is_causal: bool,
    configs: tuple[TileConfig, TileConfig] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the two backward kernels: dQ (which also writes Delta and L * log2 e), then dK/dV.
    Returns dQ, dK, dV in the inputs' dtype.

    dO may have any strides, including the all-zero strides of ``o.sum().backward()``.
    """
    _check_int32_offsets(dO=dO)
    if dO.stride(-1) != 1:  # e.g. the all-zero strides of o.sum().backward(): loads of dO rows could not be vectorised
        dO = dO.contiguous()
    dkdv_config, dq_config = configs or backward_configs(_static_head_dim(Q.shape[2]), Q.dtype)
    dQ, stats = launch_bwd_dq(Q, K, V, O, dO, L, is_causal, dq_config)  # stats: (B, Nq, 2)
    dK, dV = launch_bwd_dkdv(Q, K, V, dO, stats, is_causal, dkdv_config)
    return dQ, dK, dV


# Under the interpreter a kernel "launch" is NumPy code, which torch.compile must not trace;
# run it eagerly there (compiled callers then fall back to eager for this Function). On a GPU
# torch.compile traces the launches as calls of user-defined Triton kernels.
if TRITON_INTERPRET:
    flash_forward_triton = torch.compiler.disable(flash_forward_triton)
    flash_backward_triton = torch.compiler.disable(flash_backward_triton)


# ======================================================================================
# autograd.Function
# ======================================================================================


class FlashAttentionTriton(torch.autograd.Function):
    """FlashAttention-2 with Triton forward and backward kernels.

    ``FlashAttentionTriton.apply(Q, K, V, is_causal=False)``: Q (batch, n_queries, d), K and V
    (batch, n_keys, d), one dtype (float32/float16/bfloat16), on a CUDA device (or the CPU under
    TRITON_INTERPRET=1), any strides. Returns O with Q's shape and dtype. Saves (L, Q, K, V, O),
    L (batch, n_queries) float32 being the only tensor of that shape; nothing n_queries x n_keys
    is saved. Raises TypeError/ValueError for malformed inputs (see ``check_flash_attention_inputs``).
    Works under ``torch.compile(FlashAttentionTriton.apply)``.
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        check_flash_attention_inputs(Q, K, V, is_causal, needs_triton=True)
        O, L = flash_forward_triton(Q, K, V, is_causal)  # (B, Nq, d), (B, Nq)
        ctx.save_for_backward(L, Q, K, V, O)
        ctx.is_causal = is_causal
        return O

    @staticmethod
    def backward(ctx, dO):
        L, Q, K, V, O = ctx.saved_tensors
        dQ, dK, dV = flash_backward_triton(Q, K, V, O, dO, L, ctx.is_causal)
        return dQ, dK, dV, None
