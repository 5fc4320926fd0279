"""Hidden tests of §1.3 memory_profiling: the CUDA check comes first, a failing fn still leaves
a snapshot, max_entries bounds the trace, and earlier allocations do not count."""

from __future__ import annotations

import pickle

import pytest
import torch

MiB = 1 << 20


def test_cuda_check_comes_before_argument_checks(adapters, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError) as error:
        adapters.run_memory_profile(lambda: None, snapshot_path=str(tmp_path / "s.pickle"), max_entries=0)
    if isinstance(error.value, NotImplementedError):
        raise error.value
    assert "CUDA" in str(error.value), f"without CUDA the error must say CUDA is required; got {error.value!r}"


def alloc_sizes(snapshot):
    return [e["size"] for trace in snapshot["device_traces"] for e in trace if e.get("action") == "alloc"]


@pytest.mark.gpu
def test_failing_fn_still_writes_the_snapshot_and_stops_recording(adapters, tmp_path):
    size = 5 * MiB + 512

    def fn():
        keep = torch.empty(size, dtype=torch.uint8, device="cuda")  # noqa: F841
        raise ArithmeticError("fn failed")

    path = tmp_path / "failed.pickle"
    with pytest.raises(ArithmeticError, match="fn failed"):
        adapters.run_memory_profile(fn, snapshot_path=path)
    with open(path, "rb") as file:
        assert size in alloc_sizes(pickle.load(file)), "the snapshot of a failed fn must hold what it allocated"
    marker = 7 * MiB + 1024
    later = torch.empty(marker, dtype=torch.uint8, device="cuda")
    recorded = alloc_sizes(torch.cuda.memory._snapshot())
    del later
    assert marker not in recorded, "recording must stop even when fn raises"


@pytest.mark.gpu
def test_max_entries_bounds_the_trace(adapters, tmp_path):
    def fn():
        for i in range(20):
            torch.empty((i + 1) * 4096, dtype=torch.uint8, device="cuda")

    path = tmp_path / "short.pickle"
    adapters.run_memory_profile(fn, snapshot_path=path, max_entries=5)
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    lengths = [len(trace) for trace in snapshot["device_traces"]]
    assert lengths and max(lengths) <= 5, f"max_entries=5 keeps at most 5 events per device; got {lengths}"


@pytest.mark.gpu
def test_peak_is_reset_before_fn(adapters, tmp_path):
    big = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    del big  # the process's peak is now at least 256 MiB above what is allocated
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    peak = adapters.run_memory_profile(
        lambda: torch.ones(MiB, dtype=torch.uint8, device="cuda"), snapshot_path=tmp_path / "small.pickle"
    )
    assert before + MiB <= peak < before + 16 * MiB, (
        f"the peak must be reset before fn: fn allocates 1 MiB on top of {before} bytes, but the peak was {peak}"
    )
