"""§1.3 memory_profiling: record what the CUDA allocator does while a function runs.

PyTorch's CUDA caching allocator can keep a history of every allocation and free, with the
Python stack that caused it. Dumped to a pickle, that history opens in the viewer at
https://pytorch.org/memory_viz (or ``torch.cuda._memory_viz.trace_plot`` writes it as HTML):
you see every live tensor over time and which line of your code made it. You write
``profile_memory``, which wraps any function (a forward pass, a training step) in that
recording. See handout/README.md, §1.3.

The API is in ``torch.cuda.memory``: ``_record_memory_history(max_entries=...)`` starts
recording, ``_dump_snapshot(path)`` writes the pickle, ``_record_memory_history(enabled=None)``
stops recording. Peak memory comes from ``torch.cuda.reset_peak_memory_stats()`` and
``torch.cuda.max_memory_allocated()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.3 memory_profiling"


def profile_memory(fn: Callable[[], Any], *, snapshot_path: str | Path, max_entries: int = 1_000_000) -> int:
    """Run ``fn()`` while recording CUDA allocator history; write a snapshot; return peak bytes.

    In this order:

    1. If ``torch.cuda.is_available()`` is False, raise RuntimeError whose message says that
       CUDA is required, before doing anything else (``fn`` is not called, nothing is written).
       Look it up at call time: tests replace ``torch.cuda.is_available``.
    2. Reset the peak statistics (``torch.cuda.reset_peak_memory_stats()``), then start
       recording with ``torch.cuda.memory._record_memory_history(max_entries=max_entries)``.
    3. Call ``fn()`` once (its return value is ignored) and synchronize the device.
    4. Write the snapshot with ``torch.cuda.memory._dump_snapshot(snapshot_path)``, creating
       missing parent directories; the file is a pickle that pytorch.org/memory_viz and
       ``torch.cuda._memory_viz.trace_plot`` load, and its trace holds every allocation that
       ``fn`` made.
    5. Stop recording (``torch.cuda.memory._record_memory_history(enabled=None)``), so that
       later allocations are not recorded.

    If ``fn`` raises, still write the snapshot (it shows what filled memory before, say, an
    out-of-memory error) and stop recording, then let the exception propagate.

    Args:
        fn: the work to profile, called once with no arguments.
        snapshot_path: where to write the pickle (str or Path).
        max_entries: the most allocator events to keep; an int >= 1.

    Returns:
        Peak allocated bytes (int) while ``fn`` ran: ``torch.cuda.max_memory_allocated()``
        after the reset of step 2. Tensors alive before ``fn`` count towards it.

    Raises:
        RuntimeError: CUDA is not available (the message says CUDA is required).
        ValueError: ``max_entries`` < 1.
    """
    raise not_implemented(__file__, "profile_memory", _SECTION)
