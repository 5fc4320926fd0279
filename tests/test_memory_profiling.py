"""Visible tests of §1.3 memory_profiling.

Without CUDA only the refusal can be tested (``torch.cuda.is_available`` is forced to False, so
this test runs on GPU machines too). The snapshot and the peak need a GPU.
"""

from __future__ import annotations

import pickle

import pytest
import torch

MiB = 1 << 20


def test_without_cuda_says_cuda_is_required(adapters, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    history_calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: history_calls.append(a))
    fn_calls = []
    snapshot = tmp_path / "snapshot.pickle"
    with pytest.raises(RuntimeError) as error:
        adapters.run_memory_profile(lambda: fn_calls.append(1), snapshot_path=snapshot)
    if isinstance(error.value, NotImplementedError):
        raise error.value
    assert "CUDA" in str(error.value), f"the error must say that CUDA is required; got {str(error.value)!r}"
    assert not fn_calls and not history_calls and not snapshot.exists(), (
        "check torch.cuda.is_available() first: fn must not run, recording must not start and no "
        f"snapshot may be written (fn calls {len(fn_calls)}, recording calls {len(history_calls)}, "
        f"snapshot exists: {snapshot.exists()})"
    )


def alloc_events(snapshot) -> list[dict]:
    return [event for trace in snapshot["device_traces"] for event in trace if event.get("action") == "alloc"]


@pytest.mark.gpu
def test_snapshot_records_the_allocations_and_peak(adapters, tmp_path):
    size = 64 * MiB
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()

    def fn():
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        del block

    snapshot_path = tmp_path / "nested" / "snapshot.pickle"
    peak = adapters.run_memory_profile(fn, snapshot_path=snapshot_path)
    assert isinstance(peak, int), f"profile_memory must return peak bytes as an int; got {type(peak).__name__}"
    assert before + size <= peak <= before + size + 2 * MiB, (
        f"fn allocates {size} bytes on top of {before} already allocated; expected the peak in "
        f"[{before + size}, {before + size + 2 * MiB}], got {peak}"
    )
    with open(snapshot_path, "rb") as file:
        snapshot = pickle.load(file)
    assert {"segments", "device_traces"} <= set(snapshot), f"not a memory snapshot: keys {sorted(snapshot)}"
    sizes = [event["size"] for event in alloc_events(snapshot)]
    assert size in sizes, f"the snapshot's trace must hold fn's {size}-byte allocation; alloc sizes: {sizes[:20]}"
    from torch.cuda._memory_viz import trace_plot

    assert "<html" in trace_plot(snapshot).lower(), "memory_viz could not render the snapshot"


@pytest.mark.gpu
def test_recording_stops_afterwards(adapters, tmp_path):
    adapters.run_memory_profile(lambda: torch.ones(1024, device="cuda"), snapshot_path=tmp_path / "s.pickle")
    marker = 3 * MiB + 512
    after = torch.empty(marker, dtype=torch.uint8, device="cuda")
    sizes = [event["size"] for event in alloc_events(torch.cuda.memory._snapshot())]
    del after
    assert marker not in sizes, "recording must be stopped when profile_memory returns; a later allocation was recorded"
