"""Attention sweeps on a fake attention, for testing §2.1 on a CPU.

Read by tests/test_pytorch_attention.py and the hidden tests. The fake (``Behaviour`` in
executor/probes/pytorch_attention.py) runs next to the submission: ``fn(Q, K, V) -> Q + K + V``
whose forward and backward sleep a known time (longer on the first call per shape, like a kernel
being loaded), can raise ``torch.cuda.OutOfMemoryError`` from some sequence length on, and records
its inputs. ``torch.compile`` is watched there during the sweep and returns an eager stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.probes import run_probe


@dataclass
class FakeSweep:
    """What a sweep returned and what the fake saw: see ``probes/pytorch_attention.sweep``."""

    rows: list[dict[str, Any]]
    inputs: list[tuple]
    compile_calls: int
    compiled_the_attention: bool
    compiled_calls: int


def sweep_with_fake(adapters, behaviour: dict | None = None, **sweep_kwargs) -> FakeSweep:
    """``adapters.run_attention_sweep(**sweep_kwargs)`` with a fake attention configured by ``behaviour``
    (``forward_s``, ``backward_s``, ``first_call_s``, ``oom_forward_from``, ``oom_backward_from``;
    None: the submission's default attention)."""
    return FakeSweep(**run_probe(adapters, "pytorch_attention.sweep", behaviour, sweep_kwargs))
