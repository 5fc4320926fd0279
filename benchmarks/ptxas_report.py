"""Compile the reference FlashAttention-2 kernels for an H100/H200 (sm_90) without a GPU, and
report what ptxas says: registers, spills, and whether the wgmmas were serialised.

Staff tool, and the check behind autograder/selftests/test_reference_kernel_codegen.py. Two
things make a Hopper kernel slow before it ever runs, and both show offline:

- **register spills** (``N bytes spill stores``): local-memory traffic in the inner loop;
- **serialised wgmmas** (ptxas info C7515, "wgmma.mma_async instructions are serialized ..."):
  ptxas then waits after every tensor-core instruction, and the exponentials no longer overlap
  the matrix products. In the dK/dV kernel the order of its query loops alone decides this
  (benchmarks/NOTES.md, "C7515 depends on loop order").

The compile uses the specialisations of a real launch at the leaderboard shape: unit last
strides become the constant 1, and pointers, the other strides and the lengths are marked
divisible by 16. Without them the loads compile to 4-byte copies and the register count is wrong.

    python benchmarks/ptxas_report.py dkdv 64 64 4 3            # kernel q_tile k_tile warps stages
    python benchmarks/ptxas_report.py fwd 128 64 8 3 --d 128 --non-causal --dtype fp16
    python benchmarks/ptxas_report.py --shipped --json           # the configs the reference uses

Needs triton (its bundled ptxas), not a GPU. Must run without TRITON_INTERPRET: under the
interpreter ``@triton.jit`` functions cannot be compiled.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = {"fwd": "flash_fwd_kernel", "dkdv": "flash_bwd_dkdv_kernel", "dq": "flash_bwd_dq_kernel"}
DTYPES = ("bf16", "fp16")  # Triton type names; float32 uses IEEE dots on CUDA cores: no wgmma to check
SERIALISED = "C7515"


@dataclass(frozen=True)
class Report:
    """What ptxas said about one kernel compiled for sm_90a."""

    kernel: str
    q_tile: int
    k_tile: int
    num_warps: int
    num_stages: int
    d: int
    dtype: str
    causal: bool
    registers: int
    spill_bytes: int  # spill stores + spill loads
    serialised: bool  # ptxas info C7515: wgmma.mma_async serialised
    ptxas_info: str


def load_kernel_file(path: Path, module_name: str):
    """Import ``path``, a copy of the reference kernel file, as a module of its own named
    ``module_name`` (the reference's cs336_systems package must be registered first). Also used by
    compare_kernel_sources.py, which loads several copies side by side."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the module look themselves up here
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def _load_reference_kernels(source: Path | None):
    """The reference module (or ``source``, a patched copy of it) with its kernels as JITFunctions."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("ptxas_report cannot compile under TRITON_INTERPRET=1; unset it")
    sys.path.insert(0, str(ROOT))
    from harness.submission import load_adapters

    load_adapters(ROOT / "reference")  # registers the reference's cs336_systems package
    if source is None:
        import cs336_systems.flash_attention_triton as module

        return module
    return load_kernel_file(source, "flash_attention_triton_variant")


def compile_report(kernel: str, q_tile: int, k_tile: int, num_warps: int, num_stages: int, d: int = 64,
                   dtype: str = "bf16", causal: bool = True, source: Path | None = None) -> Report:
    """Compile one kernel for sm_90a with a leaderboard launch's specialisations; run ptxas -v on it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = _load_reference_kernels(source)
    fn = getattr(module, KERNELS[kernel])
    constexprs = {"D": d, "Q_TILE_SIZE": q_tile, "K_TILE_SIZE": k_tile, "IS_CAUSAL": causal,
                  "F32_DOTS": False, "UPCAST_DOTS": False}
    if "PAIRED_STATS" in fn.arg_names:  # the dK/dV kernel's load of the row statistics, as the launcher picks it
        constexprs["PAIRED_STATS"] = module.paired_stats_load(d)
    if "ATOMIC_DQ" in fn.arg_names:  # a candidate whose dK/dV kernel also adds dQ atomically, as its launcher picks it
        import torch

        constexprs["ATOMIC_DQ"] = module.atomic_dq(torch.bfloat16 if dtype == "bf16" else torch.float16)
    if "EVEN" in fn.arg_names:  # a candidate that drops the bounds masks when the lengths are tile multiples
        constexprs["EVEN"] = True  # as at the leaderboard shape
    signature, attrs = {}, {}
    for index, name in enumerate(fn.arg_names):
        if fn.params[index].is_constexpr:
            constexprs.setdefault(name, fn.params[index].default)
            signature[name] = "constexpr"
        elif name.startswith("stride") and (name.endswith("d") or name == "stride_lq"):
            constexprs[name] = 1  # unit strides are specialised to the constant 1 at launch
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*fp32" if name in ("L_ptr", "Stats_ptr", "DQacc_ptr") else f"*{dtype}"
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif name == "scale":
            signature[name] = "fp32"
        else:  # the other strides and the lengths: multiples of 16 at the leaderboard shape
            signature[name] = "i32"
            attrs[(index,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        done = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True, check=True)
    info = done.stdout + done.stderr
    registers = int(re.search(r"Used (\d+) registers", info).group(1))
    spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", info))
    return Report(kernel, q_tile, k_tile, num_warps, num_stages, d, dtype, causal, registers, spills,
                  SERIALISED in info, info.strip())


def shipped_reports(source: Path | None = None) -> list[Report]:
    """Reports for the configs the reference launches for 16-bit inputs, d = 64 and 128, causal or not."""
    import torch

    module = _load_reference_kernels(source)
    reports = []
    for d in (64, 128):
        fwd = module.forward_config(d, torch.bfloat16)
        dkdv, dq = module.backward_configs(d, torch.bfloat16)
        for causal in (True, False):
            for kernel, cfg in (("fwd", fwd), ("dkdv", dkdv), ("dq", dq)):
                reports.append(compile_report(kernel, cfg.q_tile, cfg.k_tile, cfg.num_warps, cfg.num_stages,
                                              d=d, causal=causal, source=source))
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?", choices=sorted(KERNELS))
    parser.add_argument("tiles", nargs="*", type=int, help="q_tile k_tile num_warps num_stages")
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--non-causal", action="store_true")
    parser.add_argument("--shipped", action="store_true", help="every config the reference launches for 16-bit inputs")
    parser.add_argument("--source", type=Path, default=None, help="a patched copy of the reference kernel file")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of a table")
    args = parser.parse_args(argv)
    if args.shipped:
        reports = shipped_reports(args.source)
    elif args.kernel and len(args.tiles) == 4:
        reports = [compile_report(args.kernel, *args.tiles, d=args.d, dtype=args.dtype,
                                  causal=not args.non_causal, source=args.source)]
    else:
        parser.error("give a kernel and its four numbers (q_tile k_tile num_warps num_stages), or --shipped")
    if args.json:
        print(json.dumps([asdict(r) for r in reports]))
        return 0
    print("| kernel | tiles (q, k, warps, stages) | d | dtype | causal | registers | spill bytes | wgmmas |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        print(f"| {r.kernel} | ({r.q_tile}, {r.k_tile}, {r.num_warps}, {r.num_stages}) | {r.d} | {r.dtype} | "
              f"{r.causal} | {r.registers} | {r.spill_bytes} | {'SERIALISED (C7515)' if r.serialised else 'async'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
