"""The §2.6 sweep on fake implementations and a fake ``bench``, for testing on a CPU.

Read by tests/test_flash_benchmarking.py and the hidden tests. The fakes run next to the
submission (executor/probes/flash_benchmarking.py): each fake implementation counts its
forward and backward calls in one shared Counter (the first can raise
``torch.cuda.OutOfMemoryError`` from some sequence length on); the fake bench runs the function
it is given once and returns a unique number, remembering which calls that run made. A row's
number then tells which work it timed. ``fake_sweep`` brings the rows and those records here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from executor.probes import run_probe

PHASES = ("forward", "backward", "forward_backward")
NAMES = ("triton", "pytorch")


@dataclass
class FakeSweep:
    """``rows``: what the sweep returned; ``ran``: {bench value: Counter of (name, phase) calls its run
    made}; ``log``: (name, Q's shape, dtype, is_causal, Q.requires_grad) per forward call."""

    rows: list[dict[str, Any]]
    ran: dict[float, Counter]
    log: list[tuple]


def fake_sweep(adapters, *, names=NAMES, oom_from=None, fake_bench=True, oom_randn_size=None, **sweep_kwargs) -> FakeSweep:
    """``adapters.run_flash_benchmark_sweep(**sweep_kwargs)`` with fake ``implementations`` called ``names``
    (the first runs out of memory for seq_len >= ``oom_from``), the fake ``bench`` unless
    ``fake_bench`` is False, and ``torch.randn`` out of memory for shapes holding ``oom_randn_size``."""
    seen = run_probe(adapters, "flash_benchmarking.sweep", sweep_kwargs, list(names), oom_from, fake_bench,
                     oom_randn_size)
    ran = {value: Counter({(name, phase): n for name, phase, n in counts}) for value, counts in seen["ran"]}
    return FakeSweep(rows=seen["rows"], ran=ran, log=[tuple(entry) for entry in seen["log"]])
