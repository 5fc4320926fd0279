"""Check the reference Triton FlashAttention-2 on a GPU, then time each kernel's tile configs.

Staff tool (needs CUDA): how the tile sizes in ``reference/cs336_systems/flash_attention_triton.py``
(``forward_config``, ``backward_configs``) were chosen. Two stages, one table each:

1. check: odd shapes (1, 17, 100, 257 tokens, n_queries != n_keys both ways, every d, causal or
   not, float32/float16/bfloat16, strided inputs, expanded dO) against float64 naive attention,
   and the leaderboard shape (16, 16384, 64) bfloat16 causal against float32 attention (SDPA's
   memory-efficient backend on float32 inputs). Reports the relative error ||x - ref|| / ||ref||
   of O, dQ, dK, dV.
2. tune: at the leaderboard shape, each candidate config of the forward, dK/dV and dQ kernels,
   checked against the default config's output and timed alone (do_bench median).

    python benchmarks/tune_flash_attention.py [--stage check|tune|all] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness import gpus  # noqa: E402
from harness.submission import load_adapters  # noqa: E402

load_adapters(ROOT / "reference")
import cs336_systems.flash_attention_triton as fat  # noqa: E402  (the reference's, registered above)

TileConfig = fat.TileConfig
LEADERBOARD = dict(batch=16, n=16384, d=64)


def naive_attention_f64(Q, K, V, is_causal):
    """The contract's truth in float64: S = QK^T/sqrt(d), -1e6 where j > i, softmax, times V."""
    Q, K, V = Q.double(), K.double(), V.double()
    S = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])  # (B, Nq, Nk)
    if is_causal:
        i = torch.arange(Q.shape[1], device=Q.device)[:, None]
        j = torch.arange(K.shape[1], device=Q.device)[None, :]
        S = S + torch.where(j > i, -1e6, 0.0)
    return torch.softmax(S, dim=-1) @ V


def rel(x, ref):
    """||x - ref|| / ||ref||, with ||ref|| floored at 1e-3 * sqrt(numel): some exact gradients are 0
    (one key: dQ = dK = 0), and rounding noise must not read as an infinite relative error."""
    floor = 1e-3 * math.sqrt(ref.numel())
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(floor)).item()


def strided(t: torch.Tensor, how: int) -> torch.Tensor:
    """The same values as t, laid out so that t is not contiguous."""
    if how == 0:
        return t
    if how == 1:  # (B, d, N) transposed
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    big = torch.empty(t.shape[0], t.shape[1], 2 * t.shape[2], dtype=t.dtype, device=t.device)  # every other column
    big[..., ::2] = t
    return big[..., ::2]


# (batch, n_queries, n_keys, d, dtype, is_causal): odd sizes, n_queries != n_keys both ways, every d
# and dtype. Few on purpose: each new (dtype, d, is_causal) compiles four kernels on a fresh machine.
CHECK_CASES = [
    (1, 1, 1, 16, torch.float32, True), (2, 17, 17, 32, torch.float16, True), (1, 100, 257, 64, torch.bfloat16, True),
    (3, 257, 100, 128, torch.float16, False), (2, 1, 100, 64, torch.bfloat16, False), (1, 300, 17, 16, torch.float32, False),
    (2, 1000, 1537, 64, torch.bfloat16, False), (1, 513, 513, 128, torch.bfloat16, True), (2, 257, 129, 64, torch.float32, True),
    (1, 4097, 4097, 64, torch.bfloat16, True),
]


def emit(rows: list[str], line: str) -> None:
    rows.append(line)
    print(line, flush=True)


def check_stage(rows: list[str]) -> bool:
    Fn = fat.FlashAttentionTriton.apply  # eager here; the leaderboard case below goes through torch.compile
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(0)
    # float32: IEEE dots land near 2e-7, but a single-key case has an exact dQ = 0 whose float32
    # rounding noise reads as ~1e-4 against the norm floor; a real bug costs > 1e-2 anywhere.
    tol = {torch.float32: 1e-3, torch.float16: 3e-3, torch.bfloat16: 2e-2}
    for index, (B, nq, nk, d, dtype, is_causal) in enumerate(CHECK_CASES):
        mk = lambda n: torch.randn(B, n, d, device="cuda", dtype=dtype, generator=gen)  # noqa: E731
        Q, K, V = (strided(t, (index + k) % 3).requires_grad_() for k, t in enumerate((mk(nq), mk(nk), mk(nk))))
        expanded = index % 2 == 0
        dO = torch.ones(1, 1, 1, device="cuda", dtype=dtype).expand(B, nq, d) if expanded else mk(nq)
        O = Fn(Q, K, V, is_causal)
        O.backward(dO)
        Qd, Kd, Vd = (t.detach().double().requires_grad_() for t in (Q, K, V))
        ref = naive_attention_f64(Qd, Kd, Vd, is_causal)
        ref.backward(dO.double())
        errs = [rel(O, ref), rel(Q.grad, Qd.grad), rel(K.grad, Kd.grad), rel(V.grad, Vd.grad)]
        good = all(math.isfinite(e) and e < tol[dtype] for e in errs) and O.dtype == dtype
        ok &= good
        emit(rows,
             f"| check | ({B},{nq},{nk},{d}) {str(dtype)[6:]} causal={is_causal} dO={'expanded' if expanded else 'random'} | "
             + " | ".join(f"{e:.1e}" for e in errs) + f" | {'ok' if good else 'FAIL'} |")
    # The leaderboard shape: bf16 against float32 attention (memory-efficient SDPA on float32 inputs).
    B, n, d = LEADERBOARD["batch"], LEADERBOARD["n"], LEADERBOARD["d"]
    q, k, v = (torch.randn(B, n, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_() for _ in range(3))
    dO = torch.randn(B, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    O = torch.compile(Fn)(q, k, v, True)
    O.backward(dO)
    q32, k32, v32 = (t.detach().float().view(1, B, n, d).requires_grad_() for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
        ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=True)
    ref.backward(dO.float().view(1, B, n, d))
    errs = [rel(O, ref.view(B, n, d)), rel(q.grad, q32.grad.view(B, n, d)), rel(k.grad, k32.grad.view(B, n, d)),
            rel(v.grad, v32.grad.view(B, n, d))]
    good = all(math.isfinite(e) and e < 2e-2 for e in errs)
    ok &= good
    emit(rows, f"| check | leaderboard ({B},{n},{d}) bf16 causal vs fp32 | " + " | ".join(f"{e:.1e}" for e in errs)
                + f" | {'ok' if good else 'FAIL'} |")
    return ok


# Candidates: configs that compile for sm_90 without register spills and without serialised
# wgmmas (ptxas -v on the kernel's PTX, compiled offline with triton.compile for
# GPUTarget("cuda", 90, 32) with the launch's specialisations: unit last strides, 16-divisible
# pointers, strides and lengths; see NOTES.md), plus the previous winners for comparison.
# TileConfig(q_tile, k_tile, num_warps, num_stages). NOTES.md has the times each got on an H200.
FWD_CANDIDATES = [TileConfig(128, 64, 8, 3), TileConfig(128, 64, 4, 3), TileConfig(64, 128, 4, 3),
                  TileConfig(128, 128, 8, 2), TileConfig(64, 64, 4, 3)]
DKDV_CANDIDATES = [TileConfig(64, 64, 4, 3), TileConfig(64, 64, 4, 4), TileConfig(32, 64, 4, 4)]
DQ_CANDIDATES = [TileConfig(64, 64, 4, 3), TileConfig(64, 64, 4, 4), TileConfig(64, 128, 4, 3),
                 TileConfig(64, 32, 4, 3)]


def tune_stage(rows: list[str], rep_ms: int) -> None:
    B, n, d = LEADERBOARD["batch"], LEADERBOARD["n"], LEADERBOARD["d"]
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dO = (torch.randn(B, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    fwd_flop = 2 * B * n * n * d  # causal: half of 4 B N^2 d
    O_ref, L_ref = fat.flash_forward_triton(q, k, v, True)
    dq_ref, stats = fat.launch_bwd_dq(q, k, v, O_ref, dO, L_ref, True, fat.backward_configs(d, q.dtype)[1])
    dkdv_ref = fat.launch_bwd_dkdv(q, k, v, dO, stats, True, fat.backward_configs(d, q.dtype)[0])

    timings: dict[str, list[tuple[float, TileConfig]]] = {"fwd": [], "dkdv": [], "dq": []}

    def bench(name, cfg, run, check, flop):
        try:
            out = run()
            err = max(rel(a, b) for a, b in zip(out, check)) if check is not None else float("nan")
            ms = triton.testing.do_bench(run, warmup=25, rep=rep_ms, return_mode="median")
            emit(rows, f"| {name} | {cfg} | {ms:.3f} | {flop / ms / 1e9:.0f} | {err:.1e} |")
            if name in timings and err < 1e-2:
                timings[name].append((ms, cfg))
        except Exception as error:  # noqa: BLE001  a config can fail to compile (shared memory): record it
            emit(rows, f"| {name} | {cfg} | failed | | {type(error).__name__}: {str(error)[:60]} |")

    for cfg in FWD_CANDIDATES:
        bench("fwd", cfg, lambda cfg=cfg: fat.flash_forward_triton(q, k, v, True, cfg), (O_ref, L_ref), fwd_flop)
    # dK/dV does 4 of the 5 backward products' worth (S^T, dV, dP^T, dK); dQ 3 (S, dP, dQ): count what each runs.
    for cfg in DKDV_CANDIDATES:
        bench("dkdv", cfg, lambda cfg=cfg: fat.launch_bwd_dkdv(q, k, v, dO, stats, True, cfg), dkdv_ref, 2 * fwd_flop)
    for cfg in DQ_CANDIDATES:
        bench("dq", cfg, lambda cfg=cfg: fat.launch_bwd_dq(q, k, v, O_ref, dO, L_ref, True, cfg), (dq_ref, stats),
              1.5 * fwd_flop)
    best = {name: min(found, key=lambda t: t[0])[1] for name, found in timings.items() if found}
    # The all-zero-stride dO of o.sum().backward(), as the kernels would see it without the
    # launcher's .contiguous(): what that copy saves.
    ones = torch.ones(1, 1, 1, device="cuda", dtype=torch.bfloat16).expand(B, n, d)
    if "dkdv" in best:
        bench("dkdv dO=expanded", best["dkdv"], lambda: fat.launch_bwd_dkdv(q, k, v, ones, stats, True, best["dkdv"]), None, 2 * fwd_flop)
    if "dq" in best:
        bench("dq dO=expanded", best["dq"], lambda: fat.launch_bwd_dq(q, k, v, O_ref, ones, L_ref, True, best["dq"]), None, 1.5 * fwd_flop)
    harness_stage(rows, best)


def harness_stage(rows: list[str], best: dict[str, TileConfig]) -> None:
    """The leaderboard's own timing (torch.compile(Fn.apply), o.sum().backward(), do_bench median),
    with the shipped configs and with this run's fastest, beside SDPA's flash and cuDNN backends."""
    from flash_attention_benchmark import SDPA_BACKENDS, sdpa_fn  # beside this file

    B, n, d = LEADERBOARD["batch"], LEADERBOARD["n"], LEADERBOARD["d"]
    torch._dynamo.reset()
    q, k, v = (torch.randn(B, n, d, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    shipped, shipped_fwd = fat.backward_configs, fat.forward_config

    def timed(label, fn, four_d=False):
        args = [t.view(1, B, n, d) for t in (q, k, v)] if four_d else [q, k, v]
        try:
            ms = triton.testing.do_bench(lambda: fn(*args, True).sum().backward(), warmup=300, rep=3000,
                                         grad_to_none=[q, k, v], return_mode="median")
            emit(rows, f"| harness | {label} | {ms:.3f} | {7 * B * n * n * d / ms / 1e9:.0f} | |")
            return ms
        except Exception as error:  # noqa: BLE001  record and go on
            emit(rows, f"| harness | {label} | failed | | {type(error).__name__}: {str(error)[:80]} |")
            return float("nan")

    flash = timed("SDPA flash", sdpa_fn(SDPA_BACKENDS["sdpa_flash"]), four_d=True)
    timed("SDPA cuDNN", sdpa_fn(SDPA_BACKENDS["sdpa_cudnn"]), four_d=True)
    ours = timed(f"reference, shipped configs {shipped(d, torch.bfloat16)}", torch.compile(fat.FlashAttentionTriton.apply))
    if "dkdv" in best and "dq" in best:
        torch._dynamo.reset()
        fat.backward_configs = lambda d, dtype: (best["dkdv"], best["dq"])
        if "fwd" in best:
            fat.forward_config = lambda d, dtype: best["fwd"]
        try:
            tuned = timed(f"reference, fastest here fwd={best.get('fwd')} dkdv={best['dkdv']} dq={best['dq']}",
                          torch.compile(fat.FlashAttentionTriton.apply))
        finally:
            fat.backward_configs, fat.forward_config = shipped, shipped_fwd
        ours = min(ours, tuned)
    emit(rows, f"| harness | best reference / SDPA flash | {ours / flash:.3f} | | |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=["check", "tune", "all"], default="all")
    parser.add_argument("--rep-ms", type=int, default=200, help="do_bench repetition time per config (ms)")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here (markdown)")
    args = parser.parse_args(argv)
    if not gpus.count():
        print("needs a CUDA GPU")
        return 2
    start = time.time()
    ok = True
    check_rows, tune_rows = [], []
    if args.stage in ("check", "all"):
        try:
            ok = check_stage(check_rows)
        except Exception as error:  # noqa: BLE001  report and still tune
            ok = False
            emit(check_rows, f"| check | crashed | {type(error).__name__}: {str(error)[:300]} | | | | FAIL |")
    if args.stage in ("tune", "all"):
        tune_stage(tune_rows, args.rep_ms)
    text = [f"GPU {gpus.names()[0]}, torch {torch.__version__}, triton {triton.__version__}, "
            f"{time.time() - start:.0f} s"]
    print(text[0], flush=True)
    if check_rows:
        text += ["", "| stage | case | O | dQ | dK | dV | verdict |", "| --- | --- | --- | --- | --- | --- | --- |"] + check_rows
    if tune_rows:
        text += ["", "| kernel | config | ms | TFLOP/s | rel err vs default |", "| --- | --- | --- | --- | --- |"] + tune_rows
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tune_flash_attention.md").write_text("\n".join(text) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
