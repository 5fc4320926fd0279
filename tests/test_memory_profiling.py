"""Visible tests of §1.3 memory_profiling.

Without CUDA only the refusal can be tested (``torch.cuda.is_available`` is forced to False next
to your code, so this test runs on GPU machines too). The snapshot and the peak need a GPU. Your
code runs a known workload in its own process (executor/probes/memory_profiling.py), which
writes the snapshot into its own temporary folder and reads it there; the checks are here.
"""

from __future__ import annotations

import pytest

from executor.probes import run_probe
from tests.checks.model_spies import outcome_value

MiB = 1 << 20


def test_without_cuda_says_cuda_is_required(adapters):
    seen = run_probe(adapters, "memory_profiling.without_cuda")
    with pytest.raises(RuntimeError) as error:
        outcome_value(seen["outcome"])
    if isinstance(error.value, NotImplementedError):
        raise error.value
    assert "CUDA" in str(error.value), f"the error must say that CUDA is required; got {str(error.value)!r}"
    assert not seen["fn_calls"] and not seen["history_calls"] and not seen["snapshot_exists"], (
        "check torch.cuda.is_available() first: fn must not run, recording must not start and no "
        f"snapshot may be written (fn calls {seen['fn_calls']}, recording calls {seen['history_calls']}, "
        f"snapshot exists: {seen['snapshot_exists']})"
    )


@pytest.mark.gpu
def test_snapshot_records_the_allocations_and_peak(adapters):
    size = 64 * MiB
    seen = run_probe(adapters, "memory_profiling.profile", "fill", size)  # allocate size bytes, fill, free
    before, peak = seen["before"], outcome_value(seen["outcome"])
    assert isinstance(peak, int), f"profile_memory must return peak bytes as an int; got {type(peak).__name__}"
    assert before + size <= peak <= before + size + 2 * MiB, (
        f"fn allocates {size} bytes on top of {before} already allocated; expected the peak in "
        f"[{before + size}, {before + size + 2 * MiB}], got {peak}"
    )
    snapshot = seen["snapshot"]
    assert snapshot is not None, "profile_memory must write the snapshot to snapshot_path (creating its folder)"
    assert {"segments", "device_traces"} <= set(snapshot["keys"]), f"not a memory snapshot: keys {snapshot['keys']}"
    sizes = snapshot["alloc_sizes"]
    assert size in sizes, f"the snapshot's trace must hold fn's {size}-byte allocation; alloc sizes: {sizes[:20]}"
    assert snapshot["renders"], "memory_viz could not render the snapshot"


@pytest.mark.gpu
def test_recording_stops_afterwards(adapters):
    marker = 3 * MiB + 512
    seen = run_probe(adapters, "memory_profiling.profile", "ones", 4096, marker_bytes=marker)
    outcome_value(seen["outcome"])
    assert not seen["marker_recorded"], (
        "recording must be stopped when profile_memory returns; a later allocation was recorded"
    )
