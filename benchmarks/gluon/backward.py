"""A Gluon FlashAttention-2 backward for sm_90 behind the reference's Triton forward (issue 42, staff).

The kernels are in ``backward_kernels.py``; README.md ("The backward kernels") says what each
variant is and what the offline compile gave. A backward is three launches:

1. ``bwd_prepass_kernel``: Delta = rowsum(O * dO), L2 = L * log2 e, dQ's fp32 accumulator zeroed;
2. the variant's main kernel: dK, dV per key tile, dQ shares added into the fp32 accumulator;
3. ``bwd_dq_cast_kernel``: dQ = scale * accumulator, in Q's dtype.

Variants (``VARIANTS``; pick one by name):

=============  ====================================================================================
plain          one warpgroup, no warp specialisation, key tile 64, Q/dO prefetched one step ahead by
               TMA, dQ by TMA reduce-add
plain_atomic   as plain, dQ by gl.atomic_add (the fallback if the reduce-add misbehaves)
ws             a 1-warp TMA loader + two consumer warpgroups (keys 0-63, 64-127 of a 128-key tile),
               2-slot Q/dO ring with ready/empty mbarriers, dQ by TMA reduce-add
ws_atomic      as ws, dQ by gl.atomic_add
ws_dqsum       as ws, but consumer 1 hands its dQ partial to consumer 0 through shared memory (two more
               mbarriers) and one TMA reduce-add per step carries both: half ws's reduce traffic
ws2_*          ``bwd_ws2_kernel`` (backward_kernels_ws2.py), d = 64 (d = 128 runs ws_dqsum's kernel):
               ws's partitions, pipelined across query steps (step i + 1's S^T issued before step
               i's dQ epilogue), 3-slot ring; ``WS2_VARIANTS`` names the dQ mode (hand-over as
               ws_dqsum / alternating owner / column split), the launch order (``_l2``: two batch
               elements' key tiles at a time) and K_w / V_w held in registers (``_k``, ``_kv``)
ws3_*          ``bwd_ws3_kernel`` (backward_kernels_ws3.py): ws2's alternating-owner and split dQ modes
               with fewer warpgroup bar.syncs per step (``WS3_VARIANTS``)
=============  ====================================================================================

Inside a step every variant issues S^T and dP^T back to back (async) and computes P^T while dP^T
runs (README's step 4), then dV, dK, dQ asynchronously, waiting once.

Supported by the Gluon path: float16/bfloat16 inputs, d in {64, 128}; anything else (float32, other d)
runs the reference's Triton backward. ``StaffFlashAttention.apply(q, k, v, is_causal, variant)`` or
``make_function(variant)(q, k, v, is_causal)``.

    python -m benchmarks.gluon.backward --offline [VARIANT ...]   # no GPU: compile for sm_90a, ptxas -v
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import triton

# the pieces' launch record, TMA descriptor helper and offline compile
from benchmarks.gluon.minimal_kernel import Launch, _desc, compile_sm90

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "reference") not in sys.path:
    sys.path.insert(0, str(ROOT / "reference"))
from cs336_systems.flash_attention_inputs import check_flash_attention_inputs  # noqa: E402
from cs336_systems.flash_attention_triton import flash_backward_triton, flash_forward_triton  # noqa: E402

from benchmarks.gluon.backward_kernels import (  # noqa: E402
    bwd_dq_cast_kernel,
    bwd_plain_kernel,
    bwd_prepass_kernel,
    bwd_ws_kernel,
)
from benchmarks.gluon.backward_kernels_ws2 import bwd_ws2_kernel  # noqa: E402
from benchmarks.gluon.backward_kernels_ws3 import bwd_ws3_kernel  # noqa: E402

# ws2 variants (backward_kernels_ws2.py): name -> (DQ_MODE, SLOTS, GROUP, KV_REGS); all pipelined across
# query steps (S^T of step i + 1 issued before step i's dQ epilogue). DQ_MODE 0: ws_dqsum's hand-over,
# 1: alternating dQ owner, 2: dQ columns split between the consumers. GROUP 2: L2-friendly launch
# order (two batch elements' key tiles at a time); 0: ws_dqsum's order. KV_REGS 1: K_w in registers
# (S^T an RS wgmma), 2: K_w and V_w (dP^T too).
WS2_VARIANTS = {
    "ws2_pipe": (0, 3, 0, 0),  # ws_dqsum + pipelining + 3-slot ring
    "ws2_pipe_l2": (0, 3, 2, 0),  # ... + L2-friendly launch order
    "ws2_alt": (1, 3, 0, 0),  # alternating dQ owner, no hand-over
    "ws2_alt_l2": (1, 3, 2, 0),
    "ws2_split": (2, 3, 0, 0),  # each consumer: dQ's 32 columns over all 128 keys, a [64, 32] reduce
    "ws2_split_l2": (2, 3, 2, 0),
    "ws2_pipe_l2_k": (0, 3, 2, 1),
    "ws2_pipe_l2_kv": (0, 3, 2, 2),
    "ws2_alt_l2_kv": (1, 3, 2, 2),
    "ws2_split_l2_k": (2, 3, 2, 1),  # (KV_REGS 2 spills 4 B in split mode, non-causal)
}
# ws3 variants (backward_kernels_ws3.py, ``bwd_ws3_kernel``): ws2's modes 1 and 2 with fewer warpgroup
# bar.syncs per step (no ds_free, one empty arrive per step; optionally unrolled by 2);
# same key (DQ_MODE, SLOTS, GROUP, KV_REGS) and launch as ws2.
WS3_VARIANTS = {  # name -> (DQ_MODE, SLOTS, GROUP, KV_REGS, UNROLL)
    "ws3_alt_l2_kv": (1, 3, 2, 2, 0),  # ws2_alt_l2_kv's levers, one step per iteration
    "ws3_alt4_l2_kv": (1, 4, 2, 2, 0),  # ... with a 4-slot ring (the slot is released half a step later)
    "ws3_split_l2_k": (2, 3, 2, 1, 0),  # ws2_split_l2_k's levers
}  # UNROLL 1 and 2 (two steps per iteration, static ownership) spill 4-164 B at d = 64: not listed (README)
VARIANTS = ("plain", "plain_atomic", "ws", "ws_atomic", "ws_dqsum") + tuple(WS2_VARIANTS) + tuple(WS3_VARIANTS)
# (DQ_MODE, SLOTS, GROUP, KV_REGS, UNROLL) of every ws2 and ws3 variant (ws2's kernel has no UNROLL)
WS_LEVERS = {**{name: levers + (0, ) for name, levers in WS2_VARIANTS.items()}, **WS3_VARIANTS}
WS2_HEAD_DIM = 64  # the ws2 variants' kernel serves d = 64; other d run ws_dqsum's kernel
GLUON_DTYPES = (torch.float16, torch.bfloat16)
GLUON_HEAD_DIMS = (64, 128)
BQ = 64  # query rows per step (one wgmma warpgroup's M for dQ)
BKW = 64  # key rows per consumer warpgroup
ROW_BLOCK = 64  # rows per program of the pre-pass and the cast kernel
WS_MAXNREG = 168  # 12 warps x 32 x 168 = 64,512 of 65,536 registers (README: "Tiles and warps")
WS_CONSUMER_REGS = 240  # the worker consumer's setmaxnreg; the loader gets 24


def gluon_supported(q: torch.Tensor) -> bool:
    """Whether the Gluon backward handles these inputs (dtype and head dim); otherwise the reference's runs."""
    return q.dtype in GLUON_DTYPES and q.shape[-1] in GLUON_HEAD_DIMS


def check_variant(variant: str) -> None:
    """Raise ValueError naming the known variants unless ``variant`` is one of them."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def _dense(t: torch.Tensor) -> torch.Tensor:
    """t, contiguous and 16-byte aligned (TMA descriptors need both); a copy only where t is not."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def plan_backward(variant: str, Q, K, V, O, dO, L, is_causal: bool):
    """The three launches of one backward, and (dQ, dK, dV) that they fill.

    Q, O, dO (B, NQ, d); K, V (B, NK, d); L (B, NQ) float32 natural-log logsumexp. Tensors may live
    on the CPU (offline compile: the launches are built, never run). Contiguous copies are made
    where needed (dO of ``o.sum().backward()`` has zero strides)."""
    check_variant(variant)
    B, NQ, D = Q.shape
    NK = K.shape[1]
    q, k, v, o, do = (_dense(t).view(-1, D) for t in (Q, K, V, O, dO))
    dev = q.device
    l2 = torch.empty(B * NQ, device=dev, dtype=torch.float32)
    delta = torch.empty(B * NQ, device=dev, dtype=torch.float32)
    dq32 = torch.empty(B * NQ, D, device=dev, dtype=torch.float32)
    dq = torch.empty(B, NQ, D, device=dev, dtype=Q.dtype)
    dk = torch.empty(B, NK, D, device=dev, dtype=K.dtype)
    dv = torch.empty(B, NK, D, device=dev, dtype=V.dtype)
    scale = 1.0 / math.sqrt(D)
    rows_grid = (triton.cdiv(B * NQ, ROW_BLOCK), )
    prepass = Launch(bwd_prepass_kernel, rows_grid, (o, do, L.contiguous(), l2, delta, dq32, B * NQ),
                     dict(D=D, BLOCK=ROW_BLOCK))
    descs = (_desc(q, [BQ, D]), _desc(k, [BKW, D]), _desc(v, [BKW, D]), _desc(do, [BQ, D]), _desc(dq32, [BQ, D]))
    common = descs + (dq32, l2, delta, dk, dv, NQ, NK, scale * 1.4426950408889634, scale)
    atomic = variant.endswith("_atomic")
    if variant in WS_LEVERS and D != WS2_HEAD_DIM:
        variant = "ws_dqsum"  # d = 128: 3 slots + 4 dS^T buffers exceed shared memory (256 KB); ws_dqsum's kernel
    if variant in WS_LEVERS:
        dq_mode, slots, group, kv_regs, unroll = WS_LEVERS[variant]
        tiles = triton.cdiv(NK, 2 * BKW)
        group = group if group and B % group == 0 else (1 if group else 0)  # GROUP must divide B
        grid = (group, tiles, B // group) if group else (B, tiles)
        halves = (_desc(k, [BKW, D // 2]), _desc(dq32, [BQ, D // 2]))  # mode 2: K's column halves, dQ halves
        main = Launch(bwd_ws3_kernel if variant in WS3_VARIANTS else bwd_ws2_kernel, grid,
                      descs + halves + (l2, delta, dk, dv, B, NQ, NK, scale * 1.4426950408889634, scale),
                      dict(IS_CAUSAL=is_causal, DQ_MODE=dq_mode, SLOTS=slots, GROUP=group, KV_REGS=kv_regs,
                           CONSUMER_REGS=WS_CONSUMER_REGS, **({"UNROLL": unroll} if variant in WS3_VARIANTS else {})),
                      num_warps=4, maxnreg=WS_MAXNREG)
    elif variant.startswith("ws"):
        main = Launch(bwd_ws_kernel, (B, triton.cdiv(NK, 2 * BKW)), common,
                      dict(IS_CAUSAL=is_causal, DQ_ATOMIC=atomic, DQ_SUM=variant == "ws_dqsum",
                           CONSUMER_REGS=WS_CONSUMER_REGS), num_warps=4,
                      maxnreg=WS_MAXNREG)
    else:
        main = Launch(bwd_plain_kernel, (B, triton.cdiv(NK, BKW)), common, dict(IS_CAUSAL=is_causal, DQ_ATOMIC=atomic),
                      num_warps=4)
    cast = Launch(bwd_dq_cast_kernel, rows_grid, (dq32, dq, B * NQ, scale), dict(D=D, BLOCK=ROW_BLOCK))
    return [prepass, main, cast], (dq, dk, dv)


def _run(launch: Launch) -> None:
    launch.kernel[launch.grid](*launch.args, **launch.constexprs, num_warps=launch.num_warps, maxnreg=launch.maxnreg)


def gluon_backward(variant: str, Q, K, V, O, dO, L, is_causal: bool):
    """(dQ, dK, dV) in the inputs' dtypes by the Gluon variant; see ``plan_backward`` for the arguments."""
    launches, grads = plan_backward(variant, Q, K, V, O, dO, L, is_causal)
    for launch in launches:
        _run(launch)
    return grads


def staff_forward(ctx, Q, K, V, is_causal: bool, variant: str):
    """The body of ``StaffFlashAttention.forward``, a plain function so that other Functions (the staff
    submission's, ``staff_submission.py``) can share it: torch.compile refuses a Function whose forward
    or backward calls another Function's static methods."""
    check_flash_attention_inputs(Q, K, V, is_causal, needs_triton=True)
    check_variant(variant)
    O, L = flash_forward_triton(Q, K, V, is_causal)  # (B, NQ, d), (B, NQ)
    ctx.save_for_backward(L, Q, K, V, O)
    ctx.is_causal = is_causal
    ctx.variant = variant
    return O


def staff_backward(ctx, dO):
    """(dQ, dK, dV) for what ``staff_forward`` saved: the Gluon variant where it applies, else the reference's."""
    L, Q, K, V, O = ctx.saved_tensors
    if gluon_supported(Q):
        return gluon_backward(ctx.variant, Q, K, V, O, dO, L, ctx.is_causal)
    return flash_backward_triton(Q, K, V, O, dO, L, ctx.is_causal)


class StaffFlashAttention(torch.autograd.Function):
    """The reference's Triton forward; the backward by a Gluon variant (float16/bfloat16, d 64 or 128)
    or else by the reference's Triton backward.

    ``StaffFlashAttention.apply(Q, K, V, is_causal=False, variant="ws")``: Q (B, NQ, d), K and V
    (B, NK, d) on a CUDA device; returns O with Q's shape and dtype. Saves (L, Q, K, V, O).
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, variant="ws"):
        return staff_forward(ctx, Q, K, V, is_causal, variant)

    @staticmethod
    def backward(ctx, dO):
        return (*staff_backward(ctx, dO), None, None)


def make_function(variant: str):
    """``fn(q, k, v, is_causal=False)`` running StaffFlashAttention with the given backward variant."""
    check_variant(variant)

    def attention(q, k, v, is_causal=False):
        return StaffFlashAttention.apply(q, k, v, is_causal, variant)

    attention.__name__ = f"staff_{variant}"
    return attention


# ----------------------------------------------------------------------------------------------
# Offline: compile every kernel for sm_90a on a machine without a GPU
# ----------------------------------------------------------------------------------------------


def offline_report(variant: str, d: int, is_causal: bool, dtype=torch.bfloat16) -> list[str]:
    """One line per kernel of the variant: ptxas registers, spills, and what the PTX contains."""
    import re

    B, N = 2, 1024
    q, k, v, o, do = (torch.zeros(B, N, d, dtype=dtype) for _ in range(5))
    launches, _ = plan_backward(variant, q, k, v, o, do, torch.zeros(B, N), is_causal)
    lines = []
    for launch in launches:
        name = launch.kernel.fn.__name__ if hasattr(launch.kernel, "fn") else str(launch.kernel)
        try:
            ptx, info, smem = compile_sm90(launch)
        except Exception as exc:  # noqa: BLE001  report and go on with the next kernel
            lines.append(f"ERROR    {variant:<13} d={d:<3} causal={int(is_causal)} {name}: "
                         f"{type(exc).__name__}: {str(exc)[:600]}")
            continue
        used = re.search(r"Used (\d+) registers", info)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
        marks = {m: ptx.count(m) for m in ("wgmma.mma_async", "cp.async.bulk.tensor", "cp.reduce.async.bulk",
                                           "setmaxnreg", "fence.proxy.async", "bar.sync", "atom.global",
                                           "red.global") if m in ptx}
        regs = " ".join(sorted({f"{kind}:{n}" for kind, n in re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx)}))
        # ptxas C7510-C7515: "wgmma.mma_async instructions are serialized due to ..." (a big slowdown)
        serial = "".join(f" {code}(wgmma serialised)" for code in sorted(set(re.findall(r"\((C751\d)\)", info))))
        lines.append(f"COMPILED {variant:<13} d={d:<3} causal={int(is_causal)} {name}: "
                     f"{used.group(1) if used else '?'} regs, spill {spill.group(1) if spill else '?'}/"
                     f"{spill.group(2) if spill else '?'} B{serial}; smem {smem // 1024} KB; setmaxnreg [{regs}]; PTX "
                     + ", ".join(f"{m} x{c}" for m, c in marks.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", default=list(VARIANTS), help=f"any of {VARIANTS}")
    parser.add_argument("--offline", action="store_true", help="compile for sm_90a (no GPU) and print ptxas -v")
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128])
    args = parser.parse_args(argv)
    if not args.offline:
        parser.error("only --offline runs from here; benchmarks/gluon/backward_check.py runs on the GPU")
    print(f"offline: compiling for sm_90a; torch {torch.__version__}, triton {triton.__version__}", flush=True)
    lines = []
    for variant in args.variants:
        for d in args.d:
            for causal in (True, False):
                for line in offline_report(variant, d, causal):
                    print(line, flush=True)
                    lines.append(line)
    return 0 if all(line.startswith("COMPILED") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
