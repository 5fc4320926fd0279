"""``python -m leaderboard.training_step run SUBMISSION [--cpu | --one-gpu | --small | --trial] [--name N] [--store FILE]``.

Judges and times one submission, prints the verdict, and appends the run's record (with the
stack and the devices) to the store. Exit status: 0 accepted, 1 refused, 2 cannot run here.
``--cpu`` is the FlashAttention board's flag too; ``--dry-run``, its old spelling here, is
still accepted.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m leaderboard.training_step")

import argparse
import sys
from pathlib import Path

from leaderboard.store import moved_store_message

from .run import DEFAULT_STORE, record, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaderboard.training_step")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="check, then time, one submission's training step")
    one.add_argument("submission")
    one.add_argument("--name", help="the entry's name in the store (default: the submission folder's name)")
    one.add_argument("--store", help=f"records file (default {DEFAULT_STORE}; --cpu runs are recorded only with --store)")
    mode = one.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="CPU: the tiny config with gloo (the pipeline only)")
    mode.add_argument("--dry-run", dest="cpu", action="store_true", help=argparse.SUPPRESS)  # the old spelling
    mode.add_argument("--trial", action="store_true", help="the official config with short timings")
    mode.add_argument("--one-gpu", dest="one_gpu", action="store_true",
                      help="1 GPU: the small config on one rank (NCCL): the GPU pipeline, time and peak memory")
    mode.add_argument("--small", action="store_true", help="2 GPUs: the official shape in small, bf16 (a trusted "
                                                           "run that fits one GPU)")
    args = parser.parse_args(argv)
    moved = moved_store_message(Path(args.store or DEFAULT_STORE)) if args.store or not args.cpu else None
    if moved:
        print(f"leaderboard.training_step: {moved}", file=sys.stderr)
        return 2
    if args.cpu:
        outcome = run(args.submission, "tiny", backend="gloo")
    else:
        from harness import gpus

        needed = 1 if args.one_gpu else 2
        if gpus.count() < needed:
            print(f"this run needs {needed} CUDA GPU(s); use --cpu on a CPU" + ("" if args.one_gpu else
                  ", or --one-gpu on one GPU"), file=sys.stderr)
            return 2
        name = "one_gpu" if args.one_gpu else "small" if args.small else "trial" if args.trial else "official"
        outcome = run(args.submission, name, backend="nccl")
    if args.store or not args.cpu:
        record(outcome, args.name or Path(args.submission).resolve().name, args.submission,
               args.store or DEFAULT_STORE)
    if outcome.accepted:
        peak = f"; peak {outcome.peak_bytes / 2**30:.2f} GiB" if outcome.peak_bytes is not None else ""
        print(f"accepted: {outcome.median_ms:.3f} ms a step (median, slowest rank; {outcome.config}, "
              f"{outcome.backend}; run took {outcome.seconds:.1f} s{peak})")
        return 0
    print("refused:\n  " + "\n  ".join(outcome.reasons))
    return 1


if __name__ == "__main__":
    sys.exit(main())
