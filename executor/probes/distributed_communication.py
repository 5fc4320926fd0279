"""Probes for the §3.1 distributed_communication tests: run the all-reduce benchmark next to the submission.

Read by tests/test_distributed_communication.py and its hidden twin. ``benchmark`` starts the
ranks with ``parallel_launch`` (every collective logged); ``report`` and ``run_cli`` run the
table, the plot and the command line in a temporary directory and bring back the text and the
PNG's first bytes. Verdicts are made in the harness.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .benchmarking_script import caught
from .parallel_launch import launch

PNG_MAGIC = "89504e470d0a1a0a"


def rank_benchmark(adapters, *, rank: int, world_size: int, device: str, size_bytes: int, warmup_steps: int,
                   measure_steps: int) -> dict:
    """One rank's ``run_benchmark_all_reduce`` (a job of ``parallel_launch``)."""
    return adapters.run_benchmark_all_reduce(size_bytes, warmup_steps=warmup_steps, measure_steps=measure_steps,
                                             device=device)


def benchmark(load_adapters: Callable[[], Any], world_size: int, size_bytes: int, warmup_steps: int,
              measure_steps: int, backend: str = "gloo", timeout_s: float = 60.0) -> dict:
    """``launch``'s report of ``world_size`` ranks running ``run_benchmark_all_reduce``."""
    kwargs = dict(size_bytes=size_bytes, warmup_steps=warmup_steps, measure_steps=measure_steps)
    return launch(load_adapters, "distributed_communication.rank_benchmark", world_size, kwargs, backend=backend,
                  timeout_s=timeout_s)


def _png_head(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, "rb") as file:
        return file.read(8).hex()


def report(load_adapters: Callable[[], Any], results: list[dict]) -> dict:
    """``run_all_reduce_report(results, <a temporary PNG>)``: {"outcome", "png_head" (hex of its first 8 bytes)}."""
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "all_reduce.png")
        outcome = caught(load_adapters().run_all_reduce_report, results, path)
        return {"outcome": outcome, "png_head": _png_head(path)}


def run_cli(load_adapters: Callable[[], Any], argv: list[str]) -> dict:
    """``run_distributed_communication_cli(argv)`` with its output captured; "{plot}" in argv is a temporary PNG.

    The submission's directory goes first on ``sys.path`` meanwhile, so that the processes the
    command line spawns import the same submission. Returns {"outcome", "stdout", "stderr", "png_head"}.
    """
    adapters = load_adapters()
    submission = os.path.dirname(os.path.abspath(adapters.__file__))
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "all_reduce.png")
        argv = [path if arg == "{plot}" else arg for arg in argv]
        sys.path.insert(0, submission)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                outcome = caught(adapters.run_distributed_communication_cli, list(argv))
        finally:
            sys.path.remove(submission)
        return {"outcome": outcome, "stdout": out.getvalue(), "stderr": err.getvalue(), "png_head": _png_head(path)}


PROBES = {"benchmark": benchmark, "report": report, "run_cli": run_cli}
