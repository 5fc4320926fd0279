"""Hidden tests of §1.3 memory_profiling: the CUDA check comes first, a failing fn still leaves
a snapshot, max_entries bounds the trace, and earlier allocations do not count."""

from __future__ import annotations

import pytest

from executor.probes import run_probe
from tests.checks.model_spies import outcome_value

MiB = 1 << 20


def test_cuda_check_comes_before_argument_checks(adapters):
    seen = run_probe(adapters, "memory_profiling.without_cuda", max_entries=0, path_as_str=True)
    with pytest.raises(RuntimeError) as error:
        outcome_value(seen["outcome"])
    if isinstance(error.value, NotImplementedError):
        raise error.value
    assert "CUDA" in str(error.value), f"without CUDA the error must say CUDA is required; got {error.value!r}"


@pytest.mark.gpu
def test_failing_fn_still_writes_the_snapshot_and_stops_recording(adapters):
    size = 5 * MiB + 512
    marker = 7 * MiB + 1024
    # fn allocates size bytes, then raises ArithmeticError("fn failed")
    seen = run_probe(adapters, "memory_profiling.profile", "raise", size, marker_bytes=marker)
    with pytest.raises(ArithmeticError, match="fn failed"):
        outcome_value(seen["outcome"])
    snapshot = seen["snapshot"]
    assert snapshot is not None and size in snapshot["alloc_sizes"], "the snapshot of a failed fn must hold what it allocated"
    assert not seen["marker_recorded"], "recording must stop even when fn raises"


@pytest.mark.gpu
def test_max_entries_bounds_the_trace(adapters):
    seen = run_probe(adapters, "memory_profiling.profile", "many", 4096, max_entries=5)  # 20 allocations
    outcome_value(seen["outcome"])
    lengths = seen["snapshot"]["trace_lengths"] if seen["snapshot"] else []
    assert lengths and max(lengths) <= 5, f"max_entries=5 keeps at most 5 events per device; got {lengths}"


@pytest.mark.gpu
def test_peak_is_reset_before_fn(adapters):
    # 256 MiB is allocated and freed first: the process's peak is then far above what is allocated.
    seen = run_probe(adapters, "memory_profiling.profile", "ones", MiB, warm_peak_bytes=256 * MiB)
    before, peak = seen["before"], outcome_value(seen["outcome"])
    assert before + MiB <= peak < before + 16 * MiB, (
        f"the peak must be reset before fn: fn allocates 1 MiB on top of {before} bytes, but the peak was {peak}"
    )
