"""Shared checks of §3.1 distributed_communication, for its visible and hidden tests.

``as_time_steps`` turns the submission's ``time_all_reduce`` into a ``time_steps``-shaped
function whose "step" is the all-reduce, so that tests/checks/timing_checks.py's fake clock judges it
(a warm-up all-reduce costs 100 s, a measured one 1 s, a sync 0.25 s). ``run_benchmark`` starts
the ranks and checks what every benchmark must satisfy.
"""

from __future__ import annotations

import pytest
import torch

from executor.probes import run_probe
from harness.parallel_runs import RUN_TIMEOUT_S, ranks_of

RESULT_KEYS = {"backend", "world_size", "size_bytes", "times", "mean_ms", "algbw_gbps", "busbw_gbps"}


def as_time_steps(adapters, tensor: torch.Tensor, seen_shapes: list | None = None):
    """``time_steps(step_fn, ...)`` built on ``adapters.run_time_all_reduce``: the fake all-reduce calls ``step_fn``."""

    def time_steps(step_fn, *, warmup_steps, measure_steps, synchronize, timer):
        def fake_all_reduce(reduced, *args, **kwargs):
            if seen_shapes is not None:
                seen_shapes.append(tuple(reduced.shape) if isinstance(reduced, torch.Tensor) else type(reduced).__name__)
            step_fn()

        return adapters.run_time_all_reduce(tensor, warmup_steps=warmup_steps, measure_steps=measure_steps,
                                            synchronize=synchronize, timer=timer, all_reduce=fake_all_reduce)

    return time_steps


def run_benchmark(adapters, world_size: int, size_bytes: int, *, warmup_steps: int, measure_steps: int,
                  backend: str = "gloo") -> list[dict]:
    """Benchmark ``size_bytes`` on ``world_size`` ranks; check each rank's summary and all-reduce calls."""
    what = f"benchmark_all_reduce({size_bytes} bytes, warmup_steps={warmup_steps}, measure_steps={measure_steps}) " \
           f"on {world_size} {backend} ranks"
    result = run_probe(adapters, "distributed_communication.benchmark", world_size, size_bytes, warmup_steps,
                       measure_steps, backend=backend, timeout_s=RUN_TIMEOUT_S)
    ranks = ranks_of(result, what)
    numel = size_bytes // 4
    means = []
    for rank, outcome in enumerate(ranks):
        value, events = outcome["value"], outcome["events"]
        assert isinstance(value, dict) and RESULT_KEYS <= set(value), (
            f"{what}: rank {rank} must return a dict with keys {sorted(RESULT_KEYS)}; got "
            f"{sorted(value) if isinstance(value, dict) else type(value).__name__}")
        assert (value["backend"], value["world_size"], value["size_bytes"]) == (backend, world_size, size_bytes), (
            f"{what}: rank {rank} reports backend {value['backend']!r}, world_size {value['world_size']}, size_bytes "
            f"{value['size_bytes']}")
        assert len(value["times"]) == measure_steps and all(t > 0 for t in value["times"]), (
            f"{what}: rank {rank} must return {measure_steps} positive times (this rank's measured steps); got "
            f"{value['times']}")
        reduces = [e for e in events if e[0] == "all_reduce"]
        sizes = sorted({e[1] for e in reduces})
        assert len(reduces) == warmup_steps + measure_steps and sizes == [numel], (
            f"{what}: rank {rank} must all-reduce one tensor of {numel} float32 elements warmup_steps + measure_steps "
            f"= {warmup_steps + measure_steps} times; it logged {len(reduces)} all-reduces of sizes {sizes}")
        assert {e[2] for e in reduces} == {"float32"}, f"{what}: the tensor must be float32; logged {reduces[:3]}"
        mean = value["mean_ms"]
        assert mean > 0 and value["algbw_gbps"] == pytest.approx(size_bytes / (mean / 1e3) / 1e9, rel=1e-3), (
            f"{what}: rank {rank}: algbw_gbps must be size_bytes / mean time in GB/s (1e9 bytes); got mean_ms "
            f"{mean}, algbw_gbps {value['algbw_gbps']}")
        ring = 2 * (world_size - 1) / world_size
        assert value["busbw_gbps"] == pytest.approx(value["algbw_gbps"] * ring, rel=1e-3), (
            f"{what}: rank {rank}: busbw_gbps must be algbw_gbps * 2 (n - 1) / n = {value['algbw_gbps'] * ring}; "
            f"got {value['busbw_gbps']}")
        means.append(mean)
    assert max(means) == pytest.approx(min(means), rel=1e-6), (
        f"{what}: mean_ms must be the mean over every rank's times (gather them), the same on every rank; got {means}")
    every_time = [t for outcome in ranks for t in outcome["value"]["times"]]
    assert means[0] == pytest.approx(sum(every_time) / len(every_time) * 1e3, rel=1e-3), (
        f"{what}: mean_ms must be the mean of every rank's measured times in ms "
        f"({sum(every_time) / len(every_time) * 1e3:.4f}); got {means[0]}")
    return ranks


def fake_results() -> list[dict]:
    """Results as benchmark_all_reduce returns them, for the report tests."""
    rows = []
    for backend, world_size, mb, mean_ms in (("gloo", 2, 1.0, 2.5), ("gloo", 2, 10.0, 21.0), ("gloo", 4, 1.0, 4.25)):
        size = int(mb * 2**20)
        algbw = size / (mean_ms / 1e3) / 1e9
        rows.append({"backend": backend, "world_size": world_size, "size_bytes": size, "times": [mean_ms / 1e3],
                     "mean_ms": mean_ms, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world_size - 1) / world_size})
    return rows


def table_rows(text: str) -> list[list[str]]:
    """The cells of each data row of the Markdown table(s) in ``text`` (header and separator rows left out)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|- :") or "backend" in line:
            continue
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows
