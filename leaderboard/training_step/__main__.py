"""``python -m leaderboard.training_step run SUBMISSION [--dry-run | --trial]``: judge and time one submission."""

from __future__ import annotations

import argparse
import sys

from .run import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaderboard.training_step")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="check, then time, one submission's training step")
    one.add_argument("submission")
    mode = one.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="CPU: the tiny config with gloo (the pipeline only)")
    mode.add_argument("--trial", action="store_true", help="the official config with short timings")
    args = parser.parse_args(argv)
    if args.dry_run:
        outcome = run(args.submission, "tiny", backend="gloo")
    else:
        import torch

        if torch.cuda.device_count() < 2:
            print("the official run needs two CUDA GPUs; use --dry-run on a CPU", file=sys.stderr)
            return 2
        outcome = run(args.submission, "trial" if args.trial else "official", backend="nccl")
    if outcome.accepted:
        print(f"accepted: {outcome.median_ms:.3f} ms a step (median, slowest rank; {outcome.config}, "
              f"{outcome.backend}; run took {outcome.seconds:.1f} s)")
        return 0
    print("refused:\n  " + "\n  ".join(outcome.reasons))
    return 1


if __name__ == "__main__":
    sys.exit(main())
