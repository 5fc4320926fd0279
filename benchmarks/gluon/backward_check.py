"""Check and time the Gluon backward variants of benchmarks/gluon/backward.py on an sm_90 GPU.

Staff tool for issue 42 (needs an H100/H200). Three commands; ``backward_run.sh`` runs them, each
in its own process under a time limit (a wrong mbarrier phase deadlocks instead of failing):

    python -m benchmarks.gluon.backward_check warm     # the reference's kernels into Triton's disk cache
    python -m benchmarks.gluon.backward_check check VARIANT
    python -m benchmarks.gluon.backward_check time VARIANT [VARIANT ...] [--rounds 3] [--rep-ms 300] [--profile]

``check``: dQ, dK, dV of StaffFlashAttention with that backward against float64 PyTorch attention
autograd on small shapes (ragged n, NQ != NK, causal and not, bfloat16 and float16, d 64 and 128),
each beside the reference Triton Function's error on the same inputs. A gradient passes when every
element is within the tests' bound (harness/flash_tolerances.py ``TOLERANCES``, atol + rtol * |e|)
and its norm-relative error is within the bound's ``norm``. Exit 0 iff every case passes.

``time``: at the leaderboard shape (16, 16384, 64) bfloat16 causal, first each variant's gradients
against the reference Triton Function's (norm-relative error), then in ``--rounds`` interleaved
rounds the ``triton.testing.do_bench`` median of forward+backward (``o.sum().backward()``, as
benchmarks/compare_kernel_sources.py times it) and of the backward alone
(``torch.autograd.grad`` of a saved forward with a random dO), for the reference Function, SDPA's
cuDNN backend (16 heads of batch 1, as the kit's benchmarks call it) and each variant. All calls
are eager (no torch.compile). Prints the medians over rounds and their ratios to cuDNN and to the
reference. ``--profile``: then, per implementation, a torch.profiler table of the CUDA kernels of
one forward+backward (mean over 5 calls after a warm call): the split between the forward, the
pre-pass, the main backward kernel and the dQ cast.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # flash_attention_benchmark's sdpa_fn, SDPA_BACKENDS

# compare_kernel_sources imports the reference as the submission (harness.submission.load_adapters), which
# must come before anything imports cs336_systems: backward.py below then finds that one.
from compare_kernel_sources import profile_kernels as kernel_rows  # noqa: E402  (its torch.profiler rows)
from compare_kernel_sources import rel  # noqa: E402  (norm-relative error in float64)
from benchmarks.gluon.backward import VARIANTS, make_function  # noqa: E402  (also puts reference/ on sys.path)
from cs336_systems.flash_attention_triton import FlashAttentionTriton  # noqa: E402
from harness.flash_tolerances import TOLERANCES  # noqa: E402

# (batch, n_queries, n_keys, d, dtype): even, ragged (TMA boxes cross batch elements), NQ != NK, one
# long, d 128, float16 once; each causal and not (causal only where NQ == NK)
CHECK_CASES = (
    (2, 128, 128, 64, torch.bfloat16),
    (2, 257, 257, 64, torch.bfloat16),
    (3, 96, 200, 64, torch.bfloat16),
    (1, 1024, 1024, 64, torch.bfloat16),
    (2, 257, 257, 128, torch.bfloat16),
    (2, 257, 257, 64, torch.float16),
)
LEADERBOARD = (16, 16384, 64)


def attention64(q, k, v, do, is_causal: bool):
    """(dQ, dK, dV) of softmax(Q K^T / sqrt(d)) V in float64 (query i sees key j <= i when causal)."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1]**0.5
    if is_causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return torch.autograd.grad(o, (q, k, v), do.double())


def grads(fn, q, k, v, do, is_causal: bool):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    return torch.autograd.grad(fn(q, k, v, is_causal), (q, k, v), do)


def judge(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> tuple[bool, str]:
    """(passes, "max abs error / norm-relative error") against the tests' tolerance for ``what``."""
    # The tests grade float32 and bfloat16; a float16 case is held to bfloat16's bounds (the looser ones).
    tol = TOLERANCES.get(dtype, TOLERANCES[torch.bfloat16])[what]
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    rel = ((a - e).norm() / e.norm().clamp_min(1e-300)).item()
    ok = bool(torch.isfinite(a).all()) and bool((err <= tol.atol + tol.rtol * e.abs()).all())
    if tol.norm is not None and e.pow(2).mean().sqrt().item() >= tol.atol:
        ok = ok and rel <= tol.norm
    return ok, f"{err.max().item():.1e}/{rel:.1e}"


def check_inputs():
    """Yield (label, q, k, v, dO, is_causal, dtype) for every CHECK_CASES case, causal first."""
    for batch, nq, nk, d, dtype in CHECK_CASES:
        for is_causal in (True, False) if nq == nk else (False, ):
            gen = torch.Generator(device="cuda").manual_seed(nq * 7 + nk + d)
            q = torch.randn(batch, nq, d, device="cuda", dtype=dtype, generator=gen)
            k, v = (torch.randn(batch, nk, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
            do = torch.randn(batch, nq, d, device="cuda", dtype=dtype, generator=gen)
            yield f"({batch},{nq},{nk},{d}) causal={int(is_causal)} {str(dtype)[6:]:<8}", q, k, v, do, is_causal, dtype


def warm() -> int:
    """Run the reference Function on every check case: its Triton kernels compile into the on-disk cache,
    so the per-variant checks (separate processes, each under a time limit) spend their time on Gluon."""
    for _, q, k, v, do, is_causal, _ in check_inputs():
        grads(FlashAttentionTriton.apply, q, k, v, do, is_causal)
    torch.cuda.synchronize()
    print("warm: the reference's kernels for every check case are compiled", flush=True)
    return 0


def check(variant: str) -> int:
    """Every check case, one line each beside the reference's errors; 0 iff all pass."""
    staff = make_function(variant)
    failures = 0
    for case, q, k, v, do, is_causal, dtype in check_inputs():
        truth = attention64(q, k, v, do, is_causal)
        try:
            mine = grads(staff, q, k, v, do, is_causal)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  a compile or launch error: report it, stop
            import traceback

            where = "".join(traceback.format_tb(exc.__traceback__)[-3:])
            print(f"ERROR {case}: {type(exc).__name__}: {str(exc)[:2000]}\n{where}", flush=True)
            return 1
        ref = grads(FlashAttentionTriton.apply, q, k, v, do, is_causal)
        parts, ok_all = [], True
        for what, a, r, e in zip(("dQ", "dK", "dV"), mine, ref, truth):
            ok, text = judge(a, e, dtype, what)
            _, ref_text = judge(r, e, dtype, what)
            ok_all &= ok
            differ = int((a != r).sum())  # a Gluon result differs from the reference's in a few last bits
            parts.append(f"{what} {text} (ref {ref_text}, {differ}/{a.numel()} differ){'' if ok else ' FAIL'}")
        failures += not ok_all
        print(f"{'PASS' if ok_all else 'FAIL'}  {case}  " + "  ".join(parts), flush=True)
    print(f"check {variant}: {'all cases PASS' if not failures else f'{failures} case(s) FAIL'} "
          "(errors: max abs / norm-relative, vs float64 autograd)", flush=True)
    return 1 if failures else 0


def sdpa_cudnn():
    from flash_attention_benchmark import SDPA_BACKENDS, sdpa_fn

    run = sdpa_fn(SDPA_BACKENDS["sdpa_cudnn"])

    def call(q, k, v, is_causal):
        return run(*(t.view(1, *t.shape) for t in (q, k, v)), is_causal).view(q.shape)

    return call


def time_variants(variants: list[str], rounds: int, rep_ms: int, profile: bool = False) -> int:
    """Leaderboard-shape gradient agreement, then interleaved do_bench rounds; prints two tables (and,
    with ``profile``, ``profile_kernels``'s tables)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(LEADERBOARD, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(True)
               for _ in range(3))
    do = torch.randn(LEADERBOARD, device="cuda", dtype=torch.bfloat16, generator=gen)
    fns = {"reference": FlashAttentionTriton.apply, "SDPA cuDNN": sdpa_cudnn()}
    base = grads(fns["reference"], q, k, v, do, True)
    print(f"leaderboard shape {LEADERBOARD} bfloat16 causal: gradients vs the reference Function "
          "(norm-relative error dQ, dK, dV)", flush=True)
    for name in ["SDPA cuDNN"] + variants:
        fn = fns.get(name) or make_function(name)
        try:
            out = grads(fn, q, k, v, do, True)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            print(f"  {name}: ERROR {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            fns.pop(name, None)
            continue
        rels = [rel(a, b) for a, b in zip(out, base)]
        print(f"  {name}: " + ", ".join(f"{r:.1e}" for r in rels), flush=True)
        fns[name] = fn
        del out
    times = {name: {"fwd+bwd": [], "bwd": []} for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            o = fn(q, k, v, True)

            def fwd_bwd(fn=fn):
                fn(q, k, v, True).sum().backward()

            def bwd(o=o):
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

            times[name]["fwd+bwd"].append(triton.testing.do_bench(fwd_bwd, warmup=50, rep=rep_ms,
                                                                  grad_to_none=[q, k, v], return_mode="median"))
            times[name]["bwd"].append(triton.testing.do_bench(bwd, warmup=50, rep=rep_ms, return_mode="median"))
            del o
    med = {name: {label: statistics.median(ts) for label, ts in per.items()} for name, per in times.items()}
    print(f"\n{rounds} interleaved rounds, do_bench rep {rep_ms} ms, median of round medians (ms); eager calls",
          flush=True)
    print("| impl | fwd+bwd ms | x cuDNN | x reference | bwd ms | x cuDNN | x reference | fwd+bwd rounds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    def ratio(name: str, label: str, to: str) -> str:
        return f"{med[name][label] / med[to][label]:.3f}" if to in med else "-"

    for name in fns:
        cells = [f"{med[name]['fwd+bwd']:.3f}", ratio(name, "fwd+bwd", "SDPA cuDNN"),
                 ratio(name, "fwd+bwd", "reference"), f"{med[name]['bwd']:.3f}", ratio(name, "bwd", "SDPA cuDNN"),
                 ratio(name, "bwd", "reference"), ", ".join(f"{t:.3f}" for t in times[name]["fwd+bwd"])]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    if profile:
        profile_kernels(fns, q, k, v)
    return 0


def profile_kernels(fns: dict, q, k, v, calls: int = 5) -> None:
    """Per implementation: each CUDA kernel's mean time per forward+backward over ``calls`` calls, its
    launches per call and its share, longest first (compare_kernel_sources.py's torch.profiler rows)."""
    print(f"\nkernels of one forward+backward (o.sum().backward(), causal, {LEADERBOARD} bfloat16), "
          f"torch.profiler, mean over {calls} calls", flush=True)
    for name, fn in fns.items():
        rows = kernel_rows(fn, q, k, v, calls)
        total = sum(ms for _, ms, _ in rows)
        print(f"\n{name}: {total:.3f} ms of kernels per call", flush=True)
        print("| ms | launches | share | kernel |")
        print("| --- | --- | --- | --- |")
        for key, ms, count in rows[:12]:
            print(f"| {ms:.3f} | {count:g} | {ms / total:.1%} | {key[:90]} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="small-shape gradients vs float64 autograd")
    p_check.add_argument("variant", choices=VARIANTS)
    sub.add_parser("warm", help="compile the reference's kernels for the check cases (on-disk cache)")
    p_time = sub.add_parser("time", help="leaderboard-shape timing vs the reference and cuDNN")
    p_time.add_argument("variants", nargs="*", help=f"any of {VARIANTS} (none: the reference and cuDNN only)")
    p_time.add_argument("--rounds", type=int, default=3)
    p_time.add_argument("--rep-ms", type=int, default=300)
    p_time.add_argument("--profile", action="store_true",
                        help="also a torch.profiler kernel table of one forward+backward per implementation")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("backward_check needs an sm_90 GPU (H100/H200); `python -m benchmarks.gluon.backward --offline` "
              "compiles the kernels without one", file=sys.stderr)
        return 2
    unknown = [v for v in getattr(args, "variants", []) if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; expected any of {VARIANTS}")
    started = time.monotonic()
    if args.command == "warm":
        rc = warm()
    elif args.command == "check":
        rc = check(args.variant)
    else:
        rc = time_variants(args.variants, args.rounds, args.rep_ms, args.profile)
    print(f"({args.command}: {time.monotonic() - started:.0f} s)", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
