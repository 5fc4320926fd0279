"""Record NVTX ranges (and, optionally, the aten ops run inside them) on any machine.

Read by the tests of §1.2 nsys_profile (visible and hidden). Real NVTX calls need a CUDA build
of PyTorch; the ``nvtx`` fixture replaces ``torch.cuda.nvtx.range_push`` and ``range_pop``
(which ``torch.cuda.nvtx.range`` calls too) with recorders for the length of one test. Student
code must therefore call them through ``torch.cuda.nvtx`` at call time, as the stubs say.

Events are tuples in one list, in the order they happened: ``("push", name)``,
``("pop", name)`` (the name of the range being closed), ``("op", "aten::bmm")`` from
``OpLogger``, and whatever tests append themselves (``("model", "forward")``, ...).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

MATMUL_OPS = {"aten::mm", "aten::bmm", "aten::matmul", "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::dot", "aten::mv"}
SOFTMAX_OPS = {"aten::_softmax", "aten::softmax", "aten::_safe_softmax", "aten::exp", "aten::exp_"}


class NvtxRecorder:
    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self._stack: list[str] = []

    def range_push(self, msg) -> int:
        self._stack.append(str(msg))
        self.events.append(("push", str(msg)))
        return len(self._stack) - 1

    def range_pop(self) -> int:
        name = self._stack.pop() if self._stack else "<pop without push>"
        self.events.append(("pop", name))
        return len(self._stack)

    @property
    def open_ranges(self) -> list[str]:
        return list(self._stack)

    def ranges(self, names=None) -> list[tuple[str, str]]:
        """The push/pop events, optionally only those of ranges called one of ``names``."""
        return [e for e in self.events if e[0] in ("push", "pop") and (names is None or e[1] in names)]


class OpLogger(TorchDispatchMode):
    """Appends ("op", "aten::name") to ``events`` for every aten op that runs inside the mode."""

    def __init__(self, events):
        super().__init__()
        self.events = events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.events.append(("op", func._schema.name))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def nvtx(monkeypatch) -> NvtxRecorder:
    """Record torch.cuda.nvtx ranges for one test instead of sending them to NVTX."""
    recorder = NvtxRecorder()
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", recorder.range_push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", recorder.range_pop)
    return recorder


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
