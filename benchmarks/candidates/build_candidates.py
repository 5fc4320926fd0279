"""Build the kernel candidates of 2026-12-02 from the reference kernel file, by exact text edits.

Staff tool. Each candidate is a full copy of ``reference/cs336_systems/flash_attention_triton.py``
as it was at commit ``BASE`` (the file the candidates were built from and timed against), with one
or more of the edits below, so that ``benchmarks/compare_kernel_sources.py`` can load them side by
side and ``benchmarks/ptxas_report.py --source`` can compile them offline. The copies are written
to an ignored folder, never committed: this script and ``BASE`` are their record. Every edit
asserts that the text it replaces is there exactly once (``lpt`` has since shipped, so the edits
apply to ``BASE``'s file, not to today's).

    python benchmarks/candidates/build_candidates.py [--out build/candidates]

Edits (benchmarks/NOTES.md, "Candidates of issue 24", has the predictions):

* ``lpt``: grid (batch, tiles) instead of (tiles, batch) for all three kernels (at most 65535
  tiles per sequence: 4M tokens at 64-row tiles): the GPU starts programs in index order, so causal work starts heaviest-first over the
  whole grid, not within each batch element (the last batch element's heaviest tiles no longer
  start near the end).
* ``even``: a constexpr EVEN (both lengths multiples of their tiles) drops the bounds masks and
  masked loads from the masked (diagonal) tiles.
* ``atomic``: dQ computed in the dK/dV kernel, one more product per tile, added into a float32
  buffer with atomic adds (FlashAttention-2's scheme: 5 products instead of 7; nondeterministic
  last bits); a small kernel writes L * log2 e and Delta first; no dQ kernel. 16-bit dtypes only.
* ``fwd_config``/``atomic_config``: other tiles for the forward / the atomic dK/dV kernel (d <= 64).
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "reference/cs336_systems/flash_attention_triton.py"
BASE = "7f1ac55"  # the reference the candidates were built from (records/2026-12-02-h200-kernel-candidates/candidates.md)


def replace(s: str, old: str, new: str, count: int = 1) -> str:
    found = s.count(old)
    if found != count:
        raise SystemExit(f"expected {count} occurrence(s), found {found}: {old[:80]!r}")
    return s.replace(old, new)


def apply_edits(s: str, edits) -> str:
    """``s`` with each (old, new, count) of ``edits`` applied in order, each checked by ``replace``."""
    for old, new, count in edits:
        s = replace(s, old, new, count)
    return s


def lpt(s: str) -> str:
    for comment in ("  # later query tiles see more keys: start them first so the tail is short", ""):
        s = replace(s, f"""    q_tile = tl.program_id(0)
    if IS_CAUSAL:{comment}
        q_tile = tl.num_programs(0) - 1 - q_tile
    b = tl.program_id(1).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
""", """    # Grid (batch, tiles), batch fastest: programs start in index order, so (causal) every batch
    # element's heaviest tile starts before any lighter one: heaviest-first over the whole grid.
    q_tile = tl.program_id(1)
    if IS_CAUSAL:  # later query tiles see more keys
        q_tile = tl.num_programs(1) - 1 - q_tile
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
""")
    s = replace(s, """    b = tl.program_id(1).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
    k_start = tl.program_id(0) * K_TILE_SIZE
""", """    # Grid (batch, tiles), batch fastest (see the forward): causal, the first key tiles are the heaviest.
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride_b can pass 2**31 elements
    k_start = tl.program_id(1) * K_TILE_SIZE
""")
    s = replace(s, "grid = (triton.cdiv(n_queries, cfg.q_tile), batch)", "grid = (batch, triton.cdiv(n_queries, cfg.q_tile))")
    s = replace(s, "flash_bwd_dkdv_kernel[(triton.cdiv(n_keys, config.k_tile), batch)](",
                "flash_bwd_dkdv_kernel[(batch, triton.cdiv(n_keys, config.k_tile))](")
    s = replace(s, "flash_bwd_dq_kernel[(triton.cdiv(n_queries, config.q_tile), batch)](",
                "flash_bwd_dq_kernel[(batch, triton.cdiv(n_queries, config.q_tile))](")
    return s


_EVEN_EDITS: tuple[tuple[str, str, int], ...] = (  # (old, new, count), applied in order by even()
    # forward: helper and masked loop
    ("""    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, IEEE_DOTS: tl.constexpr,
):""", """    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, IEEE_DOTS: tl.constexpr, EVEN: tl.constexpr = False,
):""", 1),
    ("""        s = tl.where(offs_k[None, :] < N_KEYS, s, float("-inf"))
""", """        if not EVEN:
            s = tl.where(offs_k[None, :] < N_KEYS, s, float("-inf"))
""", 1),
    ("""        k_in = (k_start + offs_k)[:, None] < N_KEYS  # (Bk, 1)
        k = tl.load(k_ptrs + k_start * stride_kk, mask=k_in, other=0.0)
        v = tl.load(v_ptrs + k_start * stride_vk, mask=k_in, other=0.0)
""", """        if EVEN:
            k = tl.load(k_ptrs + k_start * stride_kk)
            v = tl.load(v_ptrs + k_start * stride_vk)
        else:
            k_in = (k_start + offs_k)[:, None] < N_KEYS  # (Bk, 1)
            k = tl.load(k_ptrs + k_start * stride_kk, mask=k_in, other=0.0)
            v = tl.load(v_ptrs + k_start * stride_vk, mask=k_in, other=0.0)
""", 1),
    ("""            IS_CAUSAL=IS_CAUSAL, MASKED=True, IEEE_DOTS=IEEE_DOTS,
        )""", """            IS_CAUSAL=IS_CAUSAL, MASKED=True, IEEE_DOTS=IEEE_DOTS, EVEN=EVEN,
        )""", 1),
    # every kernel gets the flag
    ("""    IEEE_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
""", """    IEEE_DOTS: tl.constexpr = False,
    UPCAST_DOTS: tl.constexpr = False,
    EVEN: tl.constexpr = False,
""", 3),
    # dK/dV helper
    ("""    PAIRED_STATS: tl.constexpr,
):
    \"\"\"Add one query tile's share""", """    PAIRED_STATS: tl.constexpr, EVEN: tl.constexpr = False,
):
    \"\"\"Add one query tile's share""", 1),
    ("""    if MASKED:
        q_in = offs_q < N_QUERIES
        q = tl.load(q_ptrs, mask=q_in[:, None], other=0.0)
        do = tl.load(do_ptrs, mask=q_in[:, None], other=0.0)
    else:
        q = tl.load(q_ptrs)
        do = tl.load(do_ptrs)
    lse2, delta = _load_row_stats(Stats_ptr, offs_q, N_QUERIES, MASKED=MASKED, PAIRED=PAIRED_STATS)
""", """    if MASKED and not EVEN:
        q_in = offs_q < N_QUERIES
        q = tl.load(q_ptrs, mask=q_in[:, None], other=0.0)
        do = tl.load(do_ptrs, mask=q_in[:, None], other=0.0)
    else:
        q = tl.load(q_ptrs)
        do = tl.load(do_ptrs)
    lse2, delta = _load_row_stats(Stats_ptr, offs_q, N_QUERIES, MASKED=MASKED and not EVEN, PAIRED=PAIRED_STATS)
""", 1),
    ("""    if MASKED:
        visible = offs_q[None, :] < N_QUERIES
        if IS_CAUSAL:
            visible = visible & (offs_k[:, None] <= offs_q[None, :])
        p_t = tl.where(visible, p_t, 0.0)
""", """    if MASKED:
        if EVEN:  # only the diagonal is masked
            if IS_CAUSAL:
                p_t = tl.where(offs_k[:, None] <= offs_q[None, :], p_t, 0.0)
        else:
            visible = offs_q[None, :] < N_QUERIES
            if IS_CAUSAL:
                visible = visible & (offs_k[:, None] <= offs_q[None, :])
            p_t = tl.where(visible, p_t, 0.0)
""", 1),
    ("PAIRED_STATS=PAIRED_STATS,\n", "PAIRED_STATS=PAIRED_STATS, EVEN=EVEN,\n", 4),
    # dQ helper
    ("""    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, IEEE_DOTS: tl.constexpr, UPCAST_DOTS: tl.constexpr,
):
    \"\"\"Add one key tile's share to dQ""", """    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr, IEEE_DOTS: tl.constexpr, UPCAST_DOTS: tl.constexpr,
    EVEN: tl.constexpr = False,
):
    \"\"\"Add one key tile's share to dQ""", 1),
    ("""    if MASKED:
        k_in = offs_k[:, None] < N_KEYS
        k = tl.load(k_ptrs, mask=k_in, other=0.0)
        v = tl.load(v_ptrs, mask=k_in, other=0.0)
""", """    if MASKED and not EVEN:
        k_in = offs_k[:, None] < N_KEYS
        k = tl.load(k_ptrs, mask=k_in, other=0.0)
        v = tl.load(v_ptrs, mask=k_in, other=0.0)
""", 1),
    ("""    if MASKED:
        visible = offs_k[None, :] < N_KEYS
        if IS_CAUSAL:
            visible = visible & (offs_k[None, :] <= offs_q[:, None])
        p = tl.where(visible, p, 0.0)
""", """    if MASKED:
        if EVEN:  # only the diagonal is masked
            if IS_CAUSAL:
                p = tl.where(offs_k[None, :] <= offs_q[:, None], p, 0.0)
        else:
            visible = offs_k[None, :] < N_KEYS
            if IS_CAUSAL:
                visible = visible & (offs_k[None, :] <= offs_q[:, None])
            p = tl.where(visible, p, 0.0)
""", 1),
    ("""            IEEE_DOTS=IEEE_DOTS, UPCAST_DOTS=UPCAST_DOTS,
        )""", """            IEEE_DOTS=IEEE_DOTS, UPCAST_DOTS=UPCAST_DOTS, EVEN=EVEN,
        )""", 2),
    # launchers
    ("""        D=d, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile, IS_CAUSAL=is_causal,
        **_dot_flags(Q.dtype),""", """        D=d, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile, IS_CAUSAL=is_causal,
        **_dot_flags(Q.dtype), EVEN=_even(n_queries, n_keys, cfg),""", 1),
    ("""        D=d, Q_TILE_SIZE=config.q_tile, K_TILE_SIZE=config.k_tile, IS_CAUSAL=is_causal, **_dot_flags(Q.dtype),
""", """        D=d, Q_TILE_SIZE=config.q_tile, K_TILE_SIZE=config.k_tile, IS_CAUSAL=is_causal, **_dot_flags(Q.dtype),
        EVEN=_even(n_queries, n_keys, config),
""", 2),
    ("""def _check_int32_offsets(""", """def _even(n_queries: int, n_keys: int, config: TileConfig) -> bool:
    \"\"\"Whether both lengths are whole multiples of their tiles: then only the causal diagonal is masked.\"\"\"
    return n_queries % config.q_tile == 0 and n_keys % config.k_tile == 0


def _check_int32_offsets(""", 1),
)


def even(s: str) -> str:
    return apply_edits(s, _EVEN_EDITS)


def fwd_config(s: str, q_tile: int, k_tile: int, warps: int, stages: int) -> str:
    return replace(s, """    if d <= 64:
        return TileConfig(128, 64, num_warps=8, num_stages=3)
""", f"""    if d <= 64:
        return TileConfig({q_tile}, {k_tile}, num_warps={warps}, num_stages={stages})
""")


_ATOMIC_EDITS: list[tuple[str, str, int]] = []


def _edit(old: str, new: str, count: int = 1) -> None:
    _ATOMIC_EDITS.append((old, new, count))


# 1. query-tile helper: optional dQ product and atomic add
_edit("""    Q_ptr, dO_ptr, Stats_ptr,
    stride_qq, stride_qd, stride_doq, stride_dod,
    N_QUERIES, qk_scale,""", """    Q_ptr, dO_ptr, Stats_ptr, DQacc_ptr,
    stride_qq, stride_qd, stride_doq, stride_dod, stride_dqaq,
    N_QUERIES, qk_scale,""")
_edit("""    PAIRED_STATS: tl.constexpr,""", """    PAIRED_STATS: tl.constexpr, ATOMIC_DQ: tl.constexpr = False,""")
_edit("""    dk = _dot(ds_t.to(q.dtype), q, dk, IEEE_DOTS)  # (Bk, D)
    return dk, dv
""", """    dk = _dot(ds_t.to(q.dtype), q, dk, IEEE_DOTS)  # (Bk, D)
    if ATOMIC_DQ:  # this tile's share of dQ = dS K (unscaled), added into a float32 buffer
        dq = _dot(tl.trans(ds_t.to(k.dtype)), k, None, IEEE_DOTS)  # (Bq, D)
        dq_ptrs = DQacc_ptr + offs_q[:, None] * stride_dqaq + offs_d[None, :]
        if MASKED:
            tl.atomic_add(dq_ptrs, dq, mask=(offs_q < N_QUERIES)[:, None], sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dk, dv
""")
# 2. the dK/dV kernel's signature and calls
_edit("""def flash_bwd_dkdv_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, Stats_ptr, dK_ptr, dV_ptr,""", """def flash_bwd_dkdv_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, Stats_ptr, dK_ptr, dV_ptr, DQacc_ptr,""")
_edit("""    stride_dvb, stride_dvk, stride_dvd,
    N_QUERIES, N_KEYS,""", """    stride_dvb, stride_dvk, stride_dvd,
    stride_dqab, stride_dqaq,
    N_QUERIES, N_KEYS,""")
_edit("""    PAIRED_STATS: tl.constexpr = True,
):
    \"\"\"One program: dK and dV""", """    PAIRED_STATS: tl.constexpr = True,
    ATOMIC_DQ: tl.constexpr = False,
):
    \"\"\"One program: dK and dV""")
_edit("""    Stats_ptr += b * stride_statsb
\n    # Query tiles""", """    Stats_ptr += b * stride_statsb
    DQacc_ptr += b * stride_dqab
\n    # Query tiles""")
_edit("""k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr,""", """k, v, dk, dv, q_start, offs_k, Q_ptr, dO_ptr, Stats_ptr, DQacc_ptr,""", 4)
_edit("""stride_qq, stride_qd, stride_doq, stride_dod, N_QUERIES, qk_scale,""", """stride_qq, stride_qd, stride_doq, stride_dod, stride_dqaq, N_QUERIES, qk_scale,""", 4)
_edit("PAIRED_STATS=PAIRED_STATS,", "PAIRED_STATS=PAIRED_STATS, ATOMIC_DQ=ATOMIC_DQ,", 4)
_edit("""# ======================================================================================
# Launchers
""", """@triton.jit
def flash_bwd_stats_kernel(
    O_ptr, dO_ptr, L_ptr, Stats_ptr,
    stride_ob, stride_oq, stride_od,
    stride_dob, stride_doq, stride_dod,
    stride_lb, stride_lq,
    stride_statsb,
    N_QUERIES,
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    PAIRED_STATS: tl.constexpr = True,
):
    \"\"\"FlashAttention-2's Delta pass, for the atomic-dQ backward (where no dQ kernel runs first):
    L * log2 e and Delta = rowsum(O * dO) of one query tile into Stats (layout as the dQ kernel's).\"\"\"
    b = tl.program_id(1).to(tl.int64)
    offs_q = tl.program_id(0) * Q_TILE_SIZE + tl.arange(0, Q_TILE_SIZE)
    offs_d = tl.arange(0, D)
    q_in = offs_q < N_QUERIES
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


# ======================================================================================
# Launchers
""")

# configs: atomic dK/dV config for 16-bit d <= 64
_edit("""    if d <= 64:
        return TileConfig(64, 64, num_warps=4, num_stages=3), TileConfig(64, 128, num_warps=4, num_stages=3)
""", """    if d <= 64:
        if atomic_dq(dtype):
            return ATOMIC_DKDV_CONFIG, TileConfig(64, 128, num_warps=4, num_stages=3)
        return TileConfig(64, 64, num_warps=4, num_stages=3), TileConfig(64, 128, num_warps=4, num_stages=3)
""")
_edit("""def paired_stats_load(d: int) -> bool:""", """ATOMIC_DKDV_CONFIG = TileConfig(64, 128, num_warps=8, num_stages=2)  # candidate copies edit this line
ATOMIC_DQ_DTYPES = (torch.float16, torch.bfloat16)


def atomic_dq(dtype: torch.dtype) -> bool:
    \"\"\"Whether the backward computes dQ inside the dK/dV kernel, by float32 atomic adds
    (FlashAttention-2's scheme: 5 products instead of 7; the sum order, so the last bits, vary
    from run to run), instead of in a dQ kernel of its own.\"\"\"
    return dtype in ATOMIC_DQ_DTYPES


def paired_stats_load(d: int) -> bool:""")

_edit("""def launch_bwd_dkdv(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, dO: torch.Tensor, stats: torch.Tensor,
    is_causal: bool, config: TileConfig,
) -> tuple[torch.Tensor, torch.Tensor]:""", """def launch_bwd_dkdv(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, dO: torch.Tensor, stats: torch.Tensor,
    is_causal: bool, config: TileConfig, dq_acc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:""")
_edit("""    dV = torch.empty((batch, n_keys, d), device=V.device, dtype=V.dtype)  # (B, Nk, d)
""", """    dV = torch.empty((batch, n_keys, d), device=V.device, dtype=V.dtype)  # (B, Nk, d)
    atomic = dq_acc is not None
    if not atomic:
        dq_acc = stats  # never read: a placeholder pointer
""")
_edit("""        Q, K, V, dO, stats, dK, dV,
""", """        Q, K, V, dO, stats, dK, dV, dq_acc,
""")
_edit("""        dV.stride(0), dV.stride(1), dV.stride(2),
        n_queries, n_keys, 1.0 / math.sqrt(d),
""", """        dV.stride(0), dV.stride(1), dV.stride(2),
        dq_acc.stride(0) if atomic else 0, dq_acc.stride(1) if atomic else 0,
        n_queries, n_keys, 1.0 / math.sqrt(d),
""")
_edit("PAIRED_STATS=paired_stats_load(d), num_warps", "PAIRED_STATS=paired_stats_load(d), ATOMIC_DQ=atomic, num_warps")

_edit("""    dkdv_config, dq_config = configs or backward_configs(_static_head_dim(Q.shape[2]), Q.dtype)
    dQ, stats = launch_bwd_dq(Q, K, V, O, dO, L, is_causal, dq_config)  # stats: (B, Nq, 2)
    dK, dV = launch_bwd_dkdv(Q, K, V, dO, stats, is_causal, dkdv_config)
    return dQ, dK, dV""", """    d = _static_head_dim(Q.shape[2])
    dkdv_config, dq_config = configs or backward_configs(d, Q.dtype)
    if not atomic_dq(Q.dtype):
        dQ, stats = launch_bwd_dq(Q, K, V, O, dO, L, is_causal, dq_config)  # stats: (B, Nq, 2)
        dK, dV = launch_bwd_dkdv(Q, K, V, dO, stats, is_causal, dkdv_config)
        return dQ, dK, dV
    batch, n_queries, _ = Q.shape
    paired = paired_stats_load(d)
    stats = torch.empty((batch, n_queries, 2) if paired else (batch, 2, n_queries), device=Q.device, dtype=torch.float32)
    stats_tile = 128
    flash_bwd_stats_kernel[(triton.cdiv(n_queries, stats_tile), batch)](
        O, dO, L, stats,
        O.stride(0), O.stride(1), O.stride(2),
        dO.stride(0), dO.stride(1), dO.stride(2),
        L.stride(0), L.stride(1),
        stats.stride(0),
        n_queries,
        D=d, Q_TILE_SIZE=stats_tile, PAIRED_STATS=paired, num_warps=4,
    )
    dq_acc = torch.zeros((batch, n_queries, d), device=Q.device, dtype=torch.float32)  # (B, Nq, d)
    dK, dV = launch_bwd_dkdv(Q, K, V, dO, stats, is_causal, dkdv_config, dq_acc=dq_acc)
    dQ = (dq_acc * (1.0 / math.sqrt(d))).to(Q.dtype)  # dS = P * (dP - Delta) is the gradient of the scaled scores
    return dQ, dK, dV""")


def atomic(s: str, q_tile: int = 64, k_tile: int = 128, warps: int = 8, stages: int = 2) -> str:
    s = apply_edits(s, _ATOMIC_EDITS)
    return replace(s, "ATOMIC_DKDV_CONFIG = TileConfig(64, 128, num_warps=8, num_stages=2)",
                   f"ATOMIC_DKDV_CONFIG = TileConfig({q_tile}, {k_tile}, num_warps={warps}, num_stages={stages})")


CANDIDATES = {
    # name: edits applied to the reference, in order
    "lpt": lambda s: lpt(s),
    "even_lpt": lambda s: even(lpt(s)),
    "fwd64_lpt": lambda s: fwd_config(lpt(s), 64, 64, 4, 2),
    "fwd128w4_lpt": lambda s: fwd_config(lpt(s), 128, 64, 4, 2),
    "atomic_lpt": lambda s: atomic(lpt(s)),
    "atomic_k64_lpt": lambda s: atomic(lpt(s), 64, 64, 4, 2),
    "combo": lambda s: atomic(even(lpt(s))),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "candidates", help="folder for the copies")
    args = parser.parse_args(argv)
    reference = subprocess.run(["git", "show", f"{BASE}:{REFERENCE}"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in CANDIDATES.items():
        text = build(reference)
        text = text.replace('"""FlashAttention-2 in Triton (§2.4 forward, §2.5 backward): the reference solution.',
                            f'"""FlashAttention-2 in Triton: candidate "{name}" (benchmarks/candidates/build_candidates.py), '
                            f"built from the reference solution of {BASE}.", 1)
        (args.out / f"{name}.py").write_text(text)
        print(f"wrote {args.out / (name + '.py')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
