"""New tensors hold NaN in correctness requests, so that no verdict rests on what memory held before.

Read by the executor (``server.py``), which runs each request that is not a timing test's inside
``filled()``. A kernel that leaves part of an output unwritten (a ``torch.empty`` buffer, a store
that skips a row) returns whatever the allocator's block held, and that depends on what ran
earlier in the process: on an H200, two real submissions' tests flipped from passed to failed
between two grades only because tests had been added before them. With deterministic algorithms
on, PyTorch fills every tensor that ``torch.empty`` and its kin return with NaN (the largest value
for integer types; ``torch.utils.deterministic.fill_uninitialized_memory``, on by default), so an
unwritten element fails every time. ``warn_only`` keeps ops that have no deterministic
implementation running, with a warning, instead of raising. Timing requests keep PyTorch's
defaults: the fill costs a kernel per allocation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def filled(on: bool = True) -> Iterator[None]:
    """Within the scope (when ``on``), new tensors are filled with NaN; restores the settings after."""
    if not on:
        yield
        return
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
