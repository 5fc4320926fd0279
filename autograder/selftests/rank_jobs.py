"""Rank jobs for test_parallel_launch.py: ``launch`` runs them by their dotted name on each rank."""

from __future__ import annotations

import os
import time


def abort_in_teardown_on_rank0(adapters, *, rank: int, world_size: int, device: str, **kwargs) -> int:
    """Rank 0 returns at once and then aborts in destroy_process_group; the others finish 3 s later.

    Stands for gloo's threads aborting while a rank tears down after saving its result.
    """
    import torch.distributed as dist

    if rank == 0:
        dist.destroy_process_group = lambda *args, **kwargs: os.abort()
    else:
        time.sleep(3.0)
    return rank


def fail_on_rank0(adapters, *, rank: int, world_size: int, device: str, **kwargs) -> int:
    """Rank 0 raises; the others would wait for it for a minute."""
    if rank == 0:
        raise RuntimeError("rank 0 broke")
    time.sleep(60.0)
    return rank


def abort_before_reporting_on_rank0(adapters, *, rank: int, world_size: int, device: str, **kwargs) -> int:
    """Rank 0 aborts (SIGABRT) before it returns anything; the others would wait for it for a minute."""
    if rank == 0:
        os.abort()
    time.sleep(60.0)
    return rank


def hang_in_teardown_on_rank0(adapters, *, rank: int, world_size: int, device: str, **kwargs) -> int:
    """Rank 0 returns at once and then blocks in destroy_process_group for ten minutes, after its report."""
    import torch.distributed as dist

    if rank == 0:
        dist.destroy_process_group = lambda *args, **kwargs: time.sleep(600.0)
    return rank
