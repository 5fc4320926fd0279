"""The worker's start: confine the process, settle what must be set before Triton is imported,
then run ``worker.evaluate`` on the submission.

Read by staff checking what runs before the submission. The parent (``parent.BOOT``) starts
``main`` as root in a fresh sandbox; the steps and messages are ``worker.py``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from leaderboard import worker
from leaderboard.worker import MODES, WORKER_LIMITS, evaluate
from harness import gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leaderboard worker", description=worker.__doc__.splitlines()[0])
    parser.add_argument("submission", type=Path)
    parser.add_argument("--mode", choices=MODES, default="official")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, required=True, help="the parent's seed for every checked input")
    parser.add_argument("--channel-fd", type=int, required=True, help="the pipe to the parent")
    parser.add_argument("--confine", default="none", help="UID:GID to drop to (the worker starts as root), or none")
    parser.add_argument("--views", type=Path, default=None, help="a root-owned directory for confine's views")
    parser.add_argument("--triton-names", default="", help="the submission's @triton.jit function names, comma-separated")
    args = parser.parse_args(argv)

    from confine import identity, limits
    from confine.views import cover
    from leaderboard.protocol import PipeChannel

    channel = PipeChannel(args.channel_fd)
    try:
        if args.confine != "none":
            uid, gid = (int(x) for x in args.confine.split(":"))
            identity.enter(uid, gid, prepare=lambda uid, gid: cover(uid, gid, args.views))
        identity.harden()
        if args.confine != "none":  # the process count is its own only under a leased uid
            limits.apply(WORKER_LIMITS)
    except (identity.ConfinementError, OSError) as error:
        channel.send("isolation_failed", message=str(error))
        return 3
    channel.send("hello", uid=os.getuid(), gid=os.getgid(), network_confined=identity.network_confined)

    # Must be settled before triton is first imported (leaderboard.config imports torch).
    if args.mode == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        channel.send("refused", refusals=[{"code": "error", "message": "TRITON_INTERPRET=1 is set for a GPU run"}])
        return 2

    import torch

    import torch._dynamo  # noqa: F401  (imported before the snapshot: it is ours, not the submission's)
    import triton.testing  # noqa: F401

    if args.mode == "cpu":
        # One thread: a --cpu run's times mean nothing, and on a shared CPU several busy-waiting
        # threads per process make every small operation many times slower.
        torch.set_num_threads(1)
        record_interpreted_launches()
    elif not gpus.count():
        message = (
            f"the worker (uid {os.getuid()}) sees no CUDA GPU; the GPU's device files (/dev/nvidia*) must be "
            "readable and writable by every user"
        )
        channel.send("refused", refusals=[{"code": "error", "message": message}])
        return 2
    else:
        import torch._inductor  # noqa: F401

        install_launch_log(args.submission.resolve())

    names = {name for name in args.triton_names.split(",") if name}
    evaluate(args.submission.resolve(), args.mode, channel, args.repeats, args.seed, triton_names=names)
    return 0


def install_launch_log(submission: Path) -> None:
    """On a GPU: note the launches of the kernels defined in the submission (``LAUNCH_LOG``), for
    the launch record of ``Evaluation.launch_record``, which takes the log off again."""
    from executor.launches import LaunchLog

    worker.LAUNCH_LOG = LaunchLog(str(submission))
    worker.LAUNCH_LOG.install()


def record_interpreted_launches() -> None:
    """Under Triton's interpreter: note every @triton.jit function launched (in ``LAUNCH_LOG``,
    the grader's launch log: ``executor/launches.py``), and keep torch.compile from tracing
    into the interpreter (its numpy code fails under dynamo): interpreted launches run as
    written, as graph breaks."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    from executor.launches import LaunchLog

    worker.LAUNCH_LOG = LaunchLog(None)
    worker.LAUNCH_LOG.install()
    InterpretedFunction.run = torch._dynamo.disable(InterpretedFunction.run)


if __name__ == "__main__":
    sys.exit(main())
