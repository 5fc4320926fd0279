"""Check copies of the reference FlashAttention-2 kernel file on the CPU, under Triton's interpreter.

Staff tool for kernel candidates (built by benchmarks/candidates/build_candidates.py), run before any GPU time is spent:
each copy's forward and backward against float64 naive attention (harness/flash_reference.py), in
float32 and float16 (bfloat16 ``tl.dot`` is wrong under the interpreter in triton 3.6), causal and
not, at small ragged shapes, both with the interpreter's tiles and with the tiles each copy
launches on an H200 (so the masked and ragged paths of those tiles run too).

    TRITON_INTERPRET=1 python benchmarks/candidates/check_cpu.py NAME=PATH ... [--quick]

Prints one line per case and exits non-zero if any relative error passes its bound.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("run with TRITON_INTERPRET=1 (set before triton is imported)")

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from ptxas_report import load_kernel_file  # noqa: E402
from harness.flash_reference import attention_float64  # noqa: E402
from harness.submission import load_adapters  # noqa: E402

load_adapters(ROOT / "reference")
BOUNDS = {torch.float32: 1e-5, torch.float16: 5e-3}
SHAPES = [(2, 130, 130, 64), (1, 77, 200, 32), (1, 200, 77, 64), (1, 256, 256, 64), (1, 128, 256, 16), (1, 256, 128, 32)]  # (B, Nq, Nk, d)


def gpu_configs(module, d: int, dtype: torch.dtype):
    """The configs the copy launches on a GPU (its config functions return the interpreter's tiles here)."""
    saved = module.TRITON_INTERPRET
    module.TRITON_INTERPRET = False
    try:
        return module.forward_config(d, dtype), module.backward_configs(d, dtype)
    finally:
        module.TRITON_INTERPRET = saved


def rel(x, ref) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def check(name: str, module, quick: bool) -> bool:
    ok = True
    if hasattr(module, "ATOMIC_DQ_DTYPES"):  # check the atomic-dQ path in float32 too (IEEE dots: tight bounds)
        module.ATOMIC_DQ_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for shape in SHAPES[:2] if quick else SHAPES:
            batch, n_q, n_k, d = shape
            q = torch.randn((batch, n_q, d), generator=gen).to(dtype)
            k = torch.randn((batch, n_k, d), generator=gen).to(dtype)
            v = torch.randn((batch, n_k, d), generator=gen).to(dtype)
            do = torch.randn((batch, n_q, d), generator=gen).to(dtype)
            fwd_cfg, bwd_cfgs = gpu_configs(module, d, dtype)
            configs = [("interp", None, None)]
            if dtype != torch.float32:  # float32 tiles are the reference's, unchanged in every candidate
                configs.append(("gpu", fwd_cfg, bwd_cfgs))
            for causal in (True, False):
                truth = attention_float64(q, k, v, causal, do)
                for label, fc, bc in configs:
                    o, lse = module.flash_forward_triton(q, k, v, causal, fc)
                    dq, dk, dv = module.flash_backward_triton(q, k, v, o, do, lse, causal, bc)
                    errs = {"O": rel(o, truth.O), "L": rel(lse, truth.L), "dQ": rel(dq, truth.dQ),
                            "dK": rel(dk, truth.dK), "dV": rel(dv, truth.dV)}
                    worst = max(errs.values())
                    good = worst < BOUNDS[dtype]
                    ok &= good
                    print(f"{name} {str(dtype)[6:]} {shape} causal={causal} {label}: "
                          + " ".join(f"{key} {val:.1e}" for key, val in errs.items())
                          + ("" if good else "  FAIL"), flush=True)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="NAME=PATH")
    parser.add_argument("--quick", action="store_true", help="two shapes instead of four")
    args = parser.parse_args(argv)
    ok = True
    for item in args.sources:
        name, _, path = item.partition("=")
        ok &= check(name, load_kernel_file(Path(path), f"candidate_{name}"), args.quick)
    print("all within bounds" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
