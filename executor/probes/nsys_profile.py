"""Probes for the nsys_profile tests: record NVTX ranges (and the aten ops inside them) where they run.

Read by tests/checks/nvtx_recorder.py, which calls these next to the submission. Real NVTX calls need
a CUDA build of PyTorch; during a probe ``torch.cuda.nvtx.range_push`` and ``range_pop``
(which ``torch.cuda.nvtx.range`` calls too) are recorders, restored before it returns. Student
code must therefore call them through ``torch.cuda.nvtx`` at call time, as the stubs say.

Events are tuples in one list, in the order they happened: ``("push", name)``, ``("pop", name)``
(the name of the range being closed), ``("op", "aten::bmm")`` while ops are logged,
``("model", "forward" | "backward" | "optimizer.step")`` from training hooks and ``("sync", "")``
from the synchronize function a probe passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .benchmarking_script import caught


class NvtxRecorder:
    """Stands in for range_push/range_pop, appending to ``events`` and keeping the stack of open ranges."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.stack: list[str] = []

    def range_push(self, msg) -> int:
        self.stack.append(str(msg))
        self.events.append(("push", str(msg)))
        return len(self.stack) - 1

    def range_pop(self) -> int:
        name = self.stack.pop() if self.stack else "<pop without push>"
        self.events.append(("pop", name))
        return len(self.stack)

    @contextlib.contextmanager
    def installed(self):
        """Record torch.cuda.nvtx's pushes and pops inside the block."""
        nvtx = torch.cuda.nvtx
        saved = nvtx.range_push, nvtx.range_pop
        nvtx.range_push, nvtx.range_pop = self.range_push, self.range_pop
        try:
            yield self
        finally:
            nvtx.range_push, nvtx.range_pop = saved

    def seen(self, outcome: dict, **more) -> dict:
        """The observations of one probe: its outcome, the events and the ranges left open."""
        return {"outcome": outcome, "events": self.events, "open_ranges": self.stack, **more}


class OpLogger(TorchDispatchMode):
    """Appends ("op", "aten::name") to ``events`` for every aten op that runs inside the mode."""

    def __init__(self, events):
        super().__init__()
        self.events = events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.events.append(("op", func._schema.name))
        return func(*args, **(kwargs or {}))


def call(load_adapters: Callable[[], Any], fn: Callable[..., Any], args: list, kwargs: dict, log_ops: bool = False) -> dict:
    """``fn(*args, **kwargs)`` with NVTX recorded (and aten ops logged when ``log_ops``).

    Returns ``{"outcome": caught(...), "events", "open_ranges"}``.
    """
    recorder = NvtxRecorder()
    with recorder.installed(), (OpLogger(recorder.events) if log_ops else contextlib.nullcontext()):
        outcome = caught(fn, *args, **kwargs)
    return recorder.seen(outcome)


def with_annotated_attention(load_adapters: Callable[[], Any], model: torch.nn.Module, tokens: torch.Tensor) -> dict:
    """``model(tokens)`` inside ``use_attention(annotated_scaled_dot_product_attention)``, NVTX recorded."""
    adapters = load_adapters()

    def run():
        with adapters.get_use_attention()(adapters.get_annotated_scaled_dot_product_attention()):
            return model(tokens)

    recorder = NvtxRecorder()
    with recorder.installed():
        outcome = caught(run)
    return recorder.seen(outcome)


def profiled_training(load_adapters: Callable[[], Any], model: torch.nn.Module, optimizer: str, lr: float,
                      inputs: torch.Tensor, targets: torch.Tensor, *, warmup_steps: int, measure_steps: int) -> dict:
    """``run_profiled_training`` of ``model`` with a new ``torch.optim.<optimizer>`` ("AdamW" or "SGD").

    NVTX is recorded; hooks add ("model", "forward") after each forward pass of ``model``,
    ("model", "backward") when a gradient reaches its first parameter and ("model",
    "optimizer.step") after each step; the synchronize function adds ("sync", ""). Returns
    ``{"outcome", "events", "open_ranges", "before": {name: parameter before}, "after": {name:
    parameter after}, "grads": {name: .grad after, or None}}``.
    """
    adapters = load_adapters()
    opt = {"AdamW": torch.optim.AdamW, "SGD": torch.optim.SGD}[optimizer](model.parameters(), lr=lr)
    recorder = NvtxRecorder()
    events = recorder.events
    handles = [
        model.register_forward_hook(lambda module, args, output: events.append(("model", "forward"))),
        next(model.parameters()).register_post_accumulate_grad_hook(lambda p: events.append(("model", "backward"))),
        opt.register_step_post_hook(lambda o, args, kwargs: events.append(("model", "optimizer.step"))),
    ]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    try:
        with recorder.installed():
            outcome = caught(adapters.run_profiled_training, model, opt, inputs, targets, warmup_steps=warmup_steps,
                             measure_steps=measure_steps, synchronize=lambda: events.append(("sync", "")))
    finally:
        for handle in handles:
            handle.remove()
    after = {name: p.detach().clone() for name, p in model.named_parameters()}
    grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
    return recorder.seen(outcome, before=before, after=after, grads=grads)


def forward_with(load_adapters: Callable[[], Any], model: torch.nn.Module, parameters: dict, inputs: torch.Tensor):
    """``model(inputs)`` computed with ``parameters`` ({name: tensor}) in place of its own."""
    return torch.func.functional_call(model, parameters, (inputs,))


PROBES = {"call": call, "with_annotated_attention": with_annotated_attention,
          "profiled_training": profiled_training, "forward_with": forward_with}
