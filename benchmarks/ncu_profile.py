"""Forward + backward of the reference's Triton FlashAttention-2 and of SDPA's cuDNN backend, at
the leaderboard shape, for Nsight Compute to profile kernel by kernel.

Staff tool, run on a CUDA GPU from the repo root under ncu (leave the clocks alone):

    ncu --clock-control none --kernel-name "regex:flash_|cudnn|fmha" --launch-count 20 \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \\
        python3 benchmarks/ncu_profile.py

``--staff VARIANT`` adds the staff Gluon backward of ``benchmarks/gluon/backward.py`` (the reference's
forward, that variant's backward; sm_90 only); widen the kernel regex with ``|bwd_`` to see its kernels.

Each implementation runs twice, one after the other: the first call compiles (Triton) or plans
(cuDNN), the second is the one to read (ncu lists each kernel of both). The kernels are chosen
by name, not by an NVTX range: autograd runs the backward on a thread of its own, outside a
range pushed by this one. Without ncu the script just runs (a check that it works). Shape and
dtype are the leaderboard's (leaderboard/config.py); ``--batch``, ``--seq`` and ``--d`` change them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reference"))

from cs336_systems.flash_attention_triton import FlashAttentionTriton  # noqa: E402


def _reference(q, k, v, do):
    o = FlashAttentionTriton.apply(q, k, v, True)
    o.backward(do)


def _cudnn(q, k, v, do):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True)
    o.backward(do[:, None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=16384)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--staff", metavar="VARIANT", help="also profile this Gluon backward variant")
    args = parser.parse_args()
    shape = (args.batch, args.seq, args.d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    steps = [_reference, _cudnn]
    if args.staff:
        sys.path.insert(0, str(ROOT))
        from benchmarks.gluon.backward import make_function

        staff = make_function(args.staff)

        def _staff(q, k, v, do):
            staff(q, k, v, True).backward(do)

        steps.append(_staff)
    for step in steps:
        for _ in range(2):
            step(q, k, v, do)
            torch.cuda.synchronize()
    staff = f" and of the Gluon backward {args.staff!r}" if args.staff else ""
    print(f"profiled one forward + backward of the reference, of SDPA cuDNN{staff} at {shape}, bfloat16, causal")


if __name__ == "__main__":
    main()
