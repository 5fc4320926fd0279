"""Visible tests of §3.1 distributed_communication: the timing loop, the benchmark on 2 gloo ranks, the report.

The timing loop is judged with tests/checks/timing_checks.py's fake clock: the all-reduce passed in is
a fake that advances it (warm-up ones are expensive), and so is the sync. The benchmark runs on
2 CPU processes with gloo and a few KB, next to your code; every all-reduce is logged.
"""

from __future__ import annotations

import pytest
import torch

from tests.checks import timing_checks
from tests.checks.distributed_communication_checks import as_time_steps, fake_results, run_benchmark, table_rows
from executor.probes import run_probe
from executor.probes.distributed_communication import PNG_MAGIC
from tests.checks.model_spies import outcome_value


def test_time_all_reduce_excludes_warmup(adapters):
    timing_checks.check_excludes_warmup(as_time_steps(adapters, torch.zeros(8)))


def test_time_all_reduce_sync_inside_timed_region(adapters):
    time_steps = as_time_steps(adapters, torch.zeros(8))
    timing_checks.check_sync_inside_timed_region(time_steps)
    timing_checks.check_syncs_after_every_step(time_steps)


def test_time_all_reduce_reduces_the_tensor_given(adapters):
    shapes: list = []
    timing_checks.check_returns_one_float_per_measured_step(as_time_steps(adapters, torch.zeros(3, 5), shapes))
    assert shapes == [(3, 5)] * 5, (
        f"every step must all-reduce the tensor passed in (shape (3, 5)), through the all_reduce argument; "
        f"the all-reduces saw {shapes}")


def test_benchmark_all_reduce_on_two_gloo_ranks(adapters):
    run_benchmark(adapters, 2, 4096, warmup_steps=2, measure_steps=3)


def test_report_table_and_plot(adapters):
    results = fake_results()
    seen = run_probe(adapters, "distributed_communication.report", results)
    table = outcome_value(seen["outcome"])
    assert isinstance(table, str), f"markdown_table must return a str; got {type(table).__name__}"
    header = table.strip().splitlines()[0] if table.strip() else ""
    assert header == "| backend | processes | size (MB) | mean (ms) | bus bandwidth (GB/s) |", (
        f"the table's first line must be its header; got {header!r}")
    rows = table_rows(table)
    expected = [[r["backend"], str(r["world_size"]), f"{r['size_bytes'] / 2**20:g}"] for r in results]
    assert [row[:3] for row in rows] == expected, f"expected rows starting {expected} in order; got:\n{table}"
    for row, result in zip(rows, results):
        assert float(row[3]) == pytest.approx(result["mean_ms"], rel=1e-2) and float(row[4]) == pytest.approx(
            result["busbw_gbps"], rel=1e-2), f"row {row}: expected mean {result['mean_ms']} ms and bus bandwidth " \
                                             f"{result['busbw_gbps']:.2f} GB/s"
    assert seen["png_head"] == PNG_MAGIC, (
        f"plot_results must write a PNG file to the path given; its first bytes were {seen['png_head']!r}")


@pytest.mark.parametrize("argv", [["--world-sizes", "1"], ["--backend", "mpi"], ["--sizes-mb", "0"]],
                         ids=["world-size-1", "backend", "size-0"])
def test_cli_bad_input_is_one_line_error(adapters, argv):
    seen = run_probe(adapters, "distributed_communication.run_cli", argv)
    try:
        status = outcome_value(seen["outcome"])
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    lines = seen["stderr"].strip().splitlines()
    assert status == 2, f"bad input {argv} must return 2 (like argparse); got {status}; stderr: {seen['stderr']!r}"
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in seen["stderr"], (
        f"bad input {argv} must print exactly one line 'distributed_communication: error: ...'; got {seen['stderr']!r}")
