"""Probes for the §1.3 memory_profiling tests: profile a known workload next to the submission.

The workload, the snapshot file and the CUDA allocator all belong to the submission's process,
so these probes run ``run_memory_profile`` there: the snapshot goes to a fresh folder of that
process's own temporary directory (the executor cannot write the harness's), is read there, and
only plain observations come back (a snapshot is a pickle the submission's code wrote, so the
harness never unpickles it). Errors come back as ``caught`` outcomes for the tests to judge.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..tracebacks import student_traceback


def caught(fn: Callable[..., Any], *args, **kwargs) -> dict:
    """``{"value": fn(*args, **kwargs)}``, or ``{"error": {"base", "message", "code", "traceback"}}``
    with ``base`` the nearest built-in class of what ``fn`` raised."""
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as error:  # noqa: BLE001  the harness decides what an error means
        base = next(cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins")
        try:
            message = str(error)
        except Exception:  # noqa: BLE001  a student exception whose __str__ fails
            message = "<the exception's message could not be read>"
        return {"error": {"base": base, "message": message[:20_000], "code": None,
                          "traceback": student_traceback(error)[-20_000:]}}


def without_cuda(load_adapters: Callable[[], Any], max_entries: int | None = None, path_as_str: bool = False) -> dict:
    """``run_memory_profile(fn, snapshot_path=..., [max_entries])`` while ``torch.cuda.is_available()``
    is False and ``torch.cuda.memory._record_memory_history`` only counts its calls.

    Returns {"outcome": caught outcome, "fn_calls", "history_calls", "snapshot_exists"}.
    """
    adapters = load_adapters()
    folder = Path(tempfile.mkdtemp(prefix="memory-profile-"))
    snapshot = folder / "snapshot.pickle"
    fn_calls, history_calls = [], []
    real_available, real_record = torch.cuda.is_available, torch.cuda.memory._record_memory_history
    torch.cuda.is_available = lambda: False
    torch.cuda.memory._record_memory_history = lambda *a, **k: history_calls.append(a)
    try:
        kwargs = {} if max_entries is None else {"max_entries": max_entries}
        outcome = caught(adapters.run_memory_profile, lambda: fn_calls.append(1),
                         snapshot_path=str(snapshot) if path_as_str else snapshot, **kwargs)
    finally:
        torch.cuda.is_available, torch.cuda.memory._record_memory_history = real_available, real_record
    observed = {"outcome": outcome, "fn_calls": len(fn_calls), "history_calls": len(history_calls),
                "snapshot_exists": snapshot.exists()}
    shutil.rmtree(folder, ignore_errors=True)
    return observed


def _workload(name: str, size: int) -> Callable[[], None]:
    """``fill``: allocate ``size`` bytes, fill, free; ``ones``: ``size`` one-bytes; ``raise``: allocate
    ``size`` bytes, then raise ArithmeticError("fn failed"); ``many``: 20 allocations of (i+1)*``size`` bytes."""

    def fill():
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        del block

    def ones():
        torch.ones(size, dtype=torch.uint8, device="cuda")

    def fail():
        keep = torch.empty(size, dtype=torch.uint8, device="cuda")  # noqa: F841
        raise ArithmeticError("fn failed")

    def many():
        for i in range(20):
            torch.empty((i + 1) * size, dtype=torch.uint8, device="cuda")

    return {"fill": fill, "ones": ones, "raise": fail, "many": many}[name]


def _alloc_sizes(snapshot: dict) -> list[int]:
    return [e["size"] for trace in snapshot["device_traces"] for e in trace if e.get("action") == "alloc"]


def _read_snapshot(path: Path) -> dict | None:
    """What the tests check of a snapshot file: its keys, alloc sizes, trace lengths, whether memory_viz renders it."""
    if not path.exists():
        return None
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    if not isinstance(snapshot, dict):
        return {"keys": [], "alloc_sizes": [], "trace_lengths": [], "renders": False}
    seen = {"keys": sorted(str(key) for key in snapshot), "alloc_sizes": [], "trace_lengths": [], "renders": False}
    if "device_traces" in snapshot:
        seen["alloc_sizes"] = _alloc_sizes(snapshot)
        seen["trace_lengths"] = [len(trace) for trace in snapshot["device_traces"]]
    try:
        from torch.cuda._memory_viz import trace_plot

        seen["renders"] = "<html" in trace_plot(snapshot).lower()
    except Exception:  # noqa: BLE001  a snapshot memory_viz cannot read does not render
        pass
    return seen


def profile(load_adapters: Callable[[], Any], workload: str, size: int, max_entries: int | None = None,
            warm_peak_bytes: int = 0, marker_bytes: int | None = None) -> dict:
    """Profile ``workload`` (see ``_workload``) with ``run_memory_profile`` into a fresh nested path.

    First allocates and frees ``warm_peak_bytes`` (raising the process's peak). Returns
    {"before": bytes allocated just before, "outcome": caught outcome (the peak), "snapshot":
    ``_read_snapshot`` of the file or None, "marker_recorded": whether an allocation of
    ``marker_bytes`` made after it returned appears in ``torch.cuda.memory._snapshot()``}.
    """
    adapters = load_adapters()
    if warm_peak_bytes:
        big = torch.empty(warm_peak_bytes, dtype=torch.uint8, device="cuda")
        del big
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    folder = Path(tempfile.mkdtemp(prefix="memory-profile-"))
    path = folder / "nested" / "snapshot.pickle"
    kwargs = {} if max_entries is None else {"max_entries": max_entries}
    try:
        outcome = caught(adapters.run_memory_profile, _workload(workload, size), snapshot_path=path, **kwargs)
        observed = {"before": before, "outcome": outcome, "snapshot": _read_snapshot(path), "marker_recorded": None}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if marker_bytes is not None:
        later = torch.empty(marker_bytes, dtype=torch.uint8, device="cuda")
        observed["marker_recorded"] = marker_bytes in _alloc_sizes(torch.cuda.memory._snapshot())
        del later
    return observed


PROBES = {"without_cuda": without_cuda, "profile": profile}
