"""Record NVTX ranges (and, optionally, the aten ops run inside them) on any machine.

Read by the tests of §1.2 nsys_profile (visible and hidden). The recording happens next to the
submission (probes ``nsys_profile.*``, executor/probes/nsys_profile.py, whose docstring
lists the events); the ``nvtx`` fixture is this test's ``NvtxRecording``, which runs the calls
through those probes and keeps every event they report, in order, for the test to judge.

Events are tuples: ``("push", name)``, ``("pop", name)`` (the name of the range being closed),
``("op", "aten::bmm")`` when ops are logged, ``("model", "forward")`` (and "backward",
"optimizer.step") from the training hooks, ``("sync", "")`` from the synchronize function.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from executor.probes import run_probe
from tests.checks.model_spies import outcome_value

MATMUL_OPS = {"aten::mm", "aten::bmm", "aten::matmul", "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::dot", "aten::mv"}
SOFTMAX_OPS = {"aten::_softmax", "aten::softmax", "aten::_safe_softmax", "aten::exp", "aten::exp_"}


class NvtxRecording:
    """The events of this test's calls, in order; ``open_ranges``: ranges left open by the last call."""

    def __init__(self, adapters: Any):
        self.adapters = adapters
        self.events: list[tuple[str, str]] = []
        self.open_ranges: list[str] = []
        self.training: dict[str, dict[str, torch.Tensor | None]] = {}

    def _keep(self, seen: dict) -> dict:
        self.events += [tuple(event) for event in seen["events"]]
        self.open_ranges = list(seen["open_ranges"])
        return seen

    def call(self, fn: Any, *args, log_ops: bool = False, **kwargs) -> Any:
        """``fn(*args, **kwargs)`` (a function from ``adapters``) recorded; its value, or raise its error."""
        seen = run_probe(self.adapters, "nsys_profile.call", fn, list(args), kwargs, log_ops)
        return outcome_value(self._keep(seen)["outcome"])

    def with_annotated_attention(self, model: Any, tokens: torch.Tensor) -> Any:
        """``model(tokens)`` with the annotated attention swapped in by ``use_attention``, recorded."""
        seen = run_probe(self.adapters, "nsys_profile.with_annotated_attention", model, tokens)
        return outcome_value(self._keep(seen)["outcome"])

    def profiled_training(self, model: Any, optimizer: str, lr: float, inputs: torch.Tensor, targets: torch.Tensor,
                          **steps: int) -> dict[str, dict[str, torch.Tensor | None]]:
        """``run_profiled_training`` of ``model`` with a new ``torch.optim.<optimizer>``, recorded with
        hooks' events. Returns (and keeps in ``training``, also when it raises) the parameters
        before and after, and the gradients left: {"before": {name: tensor}, "after": ..., "grads": ...}."""
        seen = run_probe(self.adapters, "nsys_profile.profiled_training", model, optimizer, lr, inputs, targets, **steps)
        self.training = {key: seen[key] for key in ("before", "after", "grads")}
        outcome_value(self._keep(seen)["outcome"])
        return self.training

    def ranges(self, names=None) -> list[tuple[str, str]]:
        """The push/pop events, optionally only those of ranges called one of ``names``."""
        return [e for e in self.events if e[0] in ("push", "pop") and (names is None or e[1] in names)]


@pytest.fixture
def nvtx(adapters) -> NvtxRecording:
    """Record torch.cuda.nvtx ranges for one test (call the submission through it)."""
    return NvtxRecording(adapters)


def ops_by_range(events) -> dict[str, list[str]]:
    """Map each innermost open range ("" for none) to the ops that ran while it was innermost."""
    stack: list[str] = []
    ops: dict[str, list[str]] = {}
    for kind, name in events:
        if kind == "push":
            stack.append(name)
        elif kind == "pop" and stack:
            stack.pop()
        elif kind == "op":
            ops.setdefault(stack[-1] if stack else "", []).append(name)
    return ops
