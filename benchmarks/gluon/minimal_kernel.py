"""Can Gluon (triton 3.6) on sm_90 express each piece of a warp-specialised FlashAttention-2 backward?

Issue 42's first device run. Staff study, read by whoever writes the Gluon backward next
(benchmarks/gluon/README.md has the design these pieces stand for). Each *piece* is the smallest
Gluon kernel that exercises one thing that backward needs; ``main()`` runs every piece on the GPU,
compares it with PyTorch, and prints one line per piece:

    PASS   the numbers match
    FAIL   it compiled and ran, the numbers are wrong (the mismatch report follows)
    ERROR  it raised: compile errors say what Gluon 3.6 refused (the exception follows)

One piece's failure never stops the others, so one run says which pieces work.

    python -m benchmarks.gluon.minimal_kernel                      # on an H100/H200; exit 0 iff all pass
    python -m benchmarks.gluon.minimal_kernel --only ws_loader_mma  # some pieces
    python -m benchmarks.gluon.minimal_kernel --offline            # no GPU: compile for sm_90a, ptxas -v

``--offline`` compiles each piece's kernel for sm_90a (TTGIR -> PTX -> ptxas), so front-end and
code-generation errors show on a machine without a GPU; only the device run says whether the numbers
are right and whether the warp-specialised kernels deadlock.

The pieces, simplest first (every tile is 64 x 64, bf16 in, fp32 accumulators, 4 warps = one warpgroup):

===================== ===============================================================================
tma_copy              TMA load of a tile into shared memory, completion on an mbarrier, TMA store
wgmma_ss              C = A B, both operands from shared memory (the shape of every backward product)
wgmma_b_transposed    S = Q K^T: B is a permuted view of K's tile (also dP = dO V^T)
wgmma_a_transposed    dV = P^T dO: A is a permuted view of P's tile (also dK = dS^T Q)
wgmma_a_in_registers  dQ = dS K: A comes from registers (dS is computed there)
one_tile_backward     the 5 products and the softmax recomputation of one (query tile, key tile) pair
ws_loader_mma         gl.warp_specialize: a 1-warp TMA loader feeds a 2-slot ring to the MMA warpgroup
ws_two_mma_warpgroups a loader and two MMA warpgroups (default partition + a 4-warp worker), FA3's shape
tma_reduce_add        fp32 TMA reduce-add of a tile into global memory (how FA3 accumulates dQ)
atomic_add            gl.atomic_add of a tile into global memory (the other way to accumulate dQ)
===================== ===============================================================================

``tma_reduce_add`` calls a builder method that the 3.6 wheel has (``create_async_tma_reduce``) but
that Gluon's Python API does not wrap (``hopper/tma.py``'s ``__all__`` lists only the copies and
``store_wait``): a small ``@builtin`` in kernels.py wraps it. If it fails, dQ goes through atomics or a
separate dQ pass (README.md).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from benchmarks.gluon.kernels import (
    TILE,
    atomic_add_kernel,
    mma_tile_kernel,
    one_tile_backward_kernel,
    tma_copy_kernel,
    tma_reduce_add_kernel,
    ws_matmul_kernel,
    ws_two_consumers_kernel,
)


# ----------------------------------------------------------------------------------------------
# Launch specifications: one per piece, buildable on any device (CPU for --offline)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One kernel launch: what ``kernel[grid](*args, **constexprs, num_warps=..., maxnreg=...)`` takes."""

    kernel: object  # a @gluon.jit function
    grid: tuple[int, ...]
    args: tuple  # runtime arguments in order: TensorDescriptors, tensors (pointers), ints, floats
    constexprs: dict = field(default_factory=dict)
    num_warps: int = 4
    maxnreg: int | None = None


# (name, actual, expected, atol, rtol): what a piece's check compares, after its launch ran
Comparison = tuple[str, torch.Tensor, torch.Tensor, float, float]


@dataclass(frozen=True)
class Piece:
    name: str
    stands_for: str  # which part of the backward it exercises
    build: Callable[[str], tuple[Launch, Callable[[], list[Comparison]]]]


def _nvmma(block: list[int], dtype: torch.dtype) -> gl.NVMMASharedLayout:
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(block, gl_dtype)


def _desc(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A TMA descriptor over a contiguous 2-D tensor, tiles of ``block``, the default swizzle."""
    return TensorDescriptor.from_tensor(t, block, _nvmma(block, t.dtype))


def _randn(*shape: int, device: str, dtype=torch.bfloat16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def build_tma_copy(device: str):
    x = _randn(2 * TILE, TILE, device=device)  # two tiles: the second checks program_id offsets
    out = torch.zeros_like(x)
    launch = Launch(tma_copy_kernel, (2, ), (_desc(x, [TILE, TILE]), _desc(out, [TILE, TILE])))
    return launch, lambda: [("out", out, x, 0.0, 0.0)]


def _build_mma(trans_a: bool, trans_b: bool, a_in_regs: bool):

    def build(device: str):
        a = _randn(TILE, TILE, device=device, seed=1)  # stored [K, M] if trans_a
        b = _randn(TILE, TILE, device=device, seed=2)  # stored [N, K] if trans_b
        c = torch.zeros(TILE, TILE, device=device, dtype=torch.float32)
        blk = [TILE, TILE]
        launch = Launch(mma_tile_kernel, (1, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk)),
                        dict(TRANS_A=trans_a, TRANS_B=trans_b, A_IN_REGS=a_in_regs))

        def check():
            a64, b64 = a.double(), b.double()
            expected = (a64.T if trans_a else a64) @ (b64.T if trans_b else b64)
            return [("C", c, expected, 1e-3, 1e-3)]  # exact bf16 products, fp32 sums of 64 terms

        return launch, check

    return build


def build_one_tile_backward(device: str):
    q, k, v, do = (_randn(TILE, TILE, device=device, seed=s) for s in (3, 4, 5, 6))
    scale = TILE**-0.5
    # forward statistics from float64 on the same bf16 inputs
    q64, k64, v64, do64 = (t.double().requires_grad_(True) for t in (q, k, v, do))
    s64 = q64 @ k64.T * scale  # (Nq, Nk)
    lse = torch.logsumexp(s64, dim=-1)  # (Nq,)
    o64 = torch.softmax(s64, dim=-1) @ v64  # (Nq, d)
    delta = (o64 * do64).sum(-1)  # (Nq,)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(o64, (q64, k64, v64), do64)
    l2 = (lse * 1.4426950408889634).detach().float()  # log2(e) * natural-log LSE
    delta32 = delta.detach().float()
    dq, dk, dv = (torch.zeros(TILE, TILE, device=device, dtype=torch.float32) for _ in range(3))
    blk = [TILE, TILE]
    launch = Launch(one_tile_backward_kernel, (1, ),
                    (_desc(q, blk), _desc(k, blk), _desc(v, blk), _desc(do, blk), _desc(dq, blk), _desc(dk, blk),
                     _desc(dv, blk), l2, delta32, scale * 1.4426950408889634, scale))
    # P and dS enter three of the products in bf16 (relative rounding 2^-8), as in the reference kernel
    return launch, lambda: [("dQ", dq, dq_ref, 2e-2, 2e-2), ("dK", dk, dk_ref, 2e-2, 2e-2),
                            ("dV", dv, dv_ref, 2e-2, 2e-2)]


def build_ws_loader_mma(device: str):
    k_total = 4 * TILE  # 4 chunks through 2 slots: every slot is refilled once, both barrier parities used
    a = _randn(2 * TILE, k_total, device=device, seed=7)  # two programs
    b = _randn(k_total, TILE, device=device, seed=8)
    c = torch.zeros(2 * TILE, TILE, device=device, dtype=torch.float32)
    blk = [TILE, TILE]
    # 4 MMA warps + 1 loader warp (its warpgroup rounded up to 4): 8 warps x 32 x 128 regs = half the file
    launch = Launch(ws_matmul_kernel, (2, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk), k_total), dict(NUM_SLOTS=2),
                    num_warps=4, maxnreg=128)
    return launch, lambda: [("C", c, a.double() @ b.double(), 1e-2, 1e-3)]


def build_ws_two_mma_warpgroups(device: str):
    k_total = 4 * TILE
    a = _randn(2 * TILE, k_total, device=device, seed=9)  # one program, two 64-row halves
    b = _randn(k_total, TILE, device=device, seed=10)
    c = torch.zeros(2 * TILE, TILE, device=device, dtype=torch.float32)
    blk = [TILE, TILE]
    # 4 (default) + 1 (loader, rounded to 4) + 4 warps = 12 warps; 12 x 32 x 168 = 64512 <= 65536 registers
    launch = Launch(ws_two_consumers_kernel, (1, ), (_desc(a, blk), _desc(b, blk), _desc(c, blk), k_total),
                    dict(NUM_SLOTS=2), num_warps=4, maxnreg=168)
    return launch, lambda: [("C", c, a.double() @ b.double(), 1e-2, 1e-3)]


def build_tma_reduce_add(device: str):
    x = _randn(2 * TILE, TILE, device=device, dtype=torch.float32, seed=11)
    base = _randn(TILE, TILE, device=device, dtype=torch.float32, seed=12)
    out = base.clone()
    launch = Launch(tma_reduce_add_kernel, (2, ), (_desc(x, [TILE, TILE]), _desc(out, [TILE, TILE])))
    return launch, lambda: [("out", out, base.double() + x[:TILE].double() + x[TILE:].double(), 1e-5, 1e-5)]


def build_atomic_add(device: str):
    x = _randn(2 * TILE, TILE, device=device, dtype=torch.float32, seed=13)
    base = _randn(TILE, TILE, device=device, dtype=torch.float32, seed=14)
    out = base.clone()
    launch = Launch(atomic_add_kernel, (2, ), (x, out), dict(BLOCK=TILE))
    return launch, lambda: [("out", out, base.double() + x[:TILE].double() + x[TILE:].double(), 1e-5, 1e-5)]


PIECES = (
    Piece("tma_copy", "every Q/K/V/dO tile load (TMA + mbarrier) and the dK/dV stores", build_tma_copy),
    Piece("wgmma_ss", "a product with both operands in shared memory", _build_mma(False, False, False)),
    Piece("wgmma_b_transposed", "S = Q K^T and dP = dO V^T", _build_mma(False, True, False)),
    Piece("wgmma_a_transposed", "dV = P^T dO and dK = dS^T Q", _build_mma(True, False, False)),
    Piece("wgmma_a_in_registers", "dQ = dS K with dS in registers", _build_mma(False, False, True)),
    Piece("one_tile_backward", "the 5 products and the recomputation of P, one tile pair", build_one_tile_backward),
    Piece("ws_loader_mma", "producer warp + MMA warpgroup, mbarrier ring (gl.warp_specialize)", build_ws_loader_mma),
    Piece("ws_two_mma_warpgroups", "producer + two consumer warpgroups (FA3's 3 warpgroups)",
          build_ws_two_mma_warpgroups),
    Piece("tma_reduce_add", "dQ accumulated by TMA reduce-add (unwrapped builder method)", build_tma_reduce_add),
    Piece("atomic_add", "dQ accumulated by gl.atomic_add", build_atomic_add),
)


# ----------------------------------------------------------------------------------------------
# Running: on the GPU, or compiled offline for sm_90a
# ----------------------------------------------------------------------------------------------


def run_piece(piece: Piece) -> tuple[str, str]:
    """Launch one piece on the GPU and judge it: ("PASS" | "FAIL" | "ERROR", detail)."""
    from harness.assertions import assert_close  # the kit's one assertion helper

    try:
        launch, check = piece.build("cuda")
        launch.kernel[launch.grid](*launch.args, **launch.constexprs, num_warps=launch.num_warps,
                                   maxnreg=launch.maxnreg)
        torch.cuda.synchronize()
    except Exception as exc:  # a compile error, a launch error, or a fault caught at the synchronize
        return "ERROR", _describe(exc)
    problems = []
    for what, actual, expected, atol, rtol in check():
        try:
            assert_close(actual, expected, atol=atol, rtol=rtol, what=what, context=piece.name)
        except AssertionError as exc:
            problems.append(str(exc))
    return ("FAIL", "\n".join(problems)) if problems else ("PASS", "")


def compile_sm90(launch: Launch) -> tuple[str, str, int]:
    """(PTX, ptxas -v output, shared memory bytes) of one launch's kernel compiled for sm_90a without a GPU;
    raises on a compile error. ``backward.py --offline`` uses it too."""
    import subprocess
    import tempfile
    from pathlib import Path

    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    fn = launch.kernel
    signature, constexprs, attrs = {}, {}, {}
    runtime = iter(launch.args)
    for index, name in enumerate(fn.arg_names):
        if fn.params[index].is_constexpr:
            signature[name] = "constexpr"
            constexprs[name] = launch.constexprs.get(name, fn.params[index].default)
            continue
        arg = next(runtime)
        signature[name] = mangle_type(arg)
        if isinstance(arg, torch.Tensor):
            attrs[(index, )] = [["tt.divisibility", 16]]  # as a launch with aligned tensors specialises it
    options = {"num_warps": launch.num_warps}
    if launch.maxnreg is not None:
        options["maxnreg"] = launch.maxnreg
    compiled = triton.compile(GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        done = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(path), "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("ptxas: " + (done.stdout + done.stderr).strip())
    return ptx, done.stdout + done.stderr, compiled.metadata.shared


def compile_offline(piece: Piece) -> tuple[str, str]:
    """Compile one piece's kernel for sm_90a without a GPU; run ptxas -v on its PTX.

    Returns ("COMPILED", ptxas's register line) or ("ERROR", the exception).
    """
    import re

    try:
        launch, _ = piece.build("cpu")
        ptx_text, info, _ = compile_sm90(launch)
        used = re.search(r"Used \d+ registers[^\n]*", info)
        marks = [m for m in ("wgmma.mma_async", "cp.async.bulk.tensor", "cp.reduce.async.bulk", "setmaxnreg",
                             "mbarrier.try_wait", "red.global", "atom.global") if m in ptx_text]
        return "COMPILED", (used.group(0) if used else "ptxas: no register line") + "; PTX has " + ", ".join(marks)
    except Exception as exc:
        return "ERROR", _describe(exc)


def _describe(exc: BaseException) -> str:
    """The exception's type and message, and the last frames: enough to tell a refusal from a bug."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in frames)
    return f"{text}\n    at {where}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[p.name for p in PIECES], help="run these pieces only")
    parser.add_argument("--offline", action="store_true", help="no GPU: compile each piece for sm_90a")
    args = parser.parse_args(argv)
    pieces = [p for p in PIECES if args.only is None or p.name in args.only]

    if not args.offline:
        if not torch.cuda.is_available():
            print("minimal_kernel: no CUDA device. These pieces need an sm_90 GPU (H100/H200) to run; "
                  "without one, `--offline` compiles them for sm_90a instead.", file=sys.stderr)
            return 2
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            print(f"minimal_kernel: this GPU is sm_{major}{minor}; the pieces use Hopper-only instructions "
                  "(wgmma, setmaxnreg) and are meant for sm_90.", file=sys.stderr)
            return 2
        print(f"device: {torch.cuda.get_device_name()} (sm_{major}{minor}); torch {torch.__version__}, "
              f"triton {triton.__version__}")
    else:
        print(f"offline: compiling for sm_90a; torch {torch.__version__}, triton {triton.__version__}")

    verdicts = []
    for piece in pieces:
        verdict, detail = compile_offline(piece) if args.offline else run_piece(piece)
        verdicts.append(verdict)
        print(f"{verdict:<8} {piece.name:<22} {piece.stands_for}", flush=True)
        if detail:
            print("    " + detail.replace("\n", "\n    "), flush=True)
    good = "COMPILED" if args.offline else "PASS"
    print(f"{sum(v == good for v in verdicts)} of {len(verdicts)} pieces {good}")
    return 0 if all(v == good for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
