"""§1.3 memory_profiling: record what the CUDA allocator does while a function runs.

Reference solution.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def profile_memory(fn: Callable[[], Any], *, snapshot_path: str | Path, max_entries: int = 1_000_000) -> int:
    """Record allocator history around ``fn()``, dump a memory_viz snapshot, return peak bytes."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "profile_memory needs CUDA: the memory snapshot records the CUDA caching allocator, and "
            "torch.cuda.is_available() is False on this machine. Run it on a machine with an NVIDIA GPU."
        )
    if not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"max_entries must be a positive integer; got {max_entries!r}")
    snapshot_path = Path(snapshot_path)
    snapshot_path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        try:
            torch.cuda.memory._dump_snapshot(str(snapshot_path))
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
    return torch.cuda.max_memory_allocated()
