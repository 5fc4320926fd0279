"""Spies on the provided Transformer LM and on torch, for tests that must see inside a benchmark.

Read by the tests of benchmarking_script, nsys_profile and torch_compile (visible and hidden).
They count what a submission's code made the model and the optimizer do without changing what
it computes:

* the ``lm_spy`` fixture (import it into a test module) runs an adapter next to the submission
  (probe ``benchmarking_script.spy_on_lm``, executor/probes/) with the provided
  ``TransformerLM`` class patched to count forward passes, record input shapes, autocast state
  and logits dtype, count backward passes (a gradient reaching the logits) and models built; a
  global optimizer hook counts ``optimizer.step()`` calls and ``torch.cuda.synchronize`` is
  counted. The records come back here, where the tests judge them.
* ``outcome_value`` turns a probe's ``caught`` outcome back into a value or a raised error.
* ``compiled_once`` runs a torch_compile probe (executor/probes/torch_compile.py, which
  watches ``torch.compile`` next to the submission) once and shares its observations and the
  compiled object between tests (compiling is slow).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from executor.probes import run_probe

TINY_MODEL = {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2}
"""Overrides that shrink any model size to something a CPU runs in milliseconds."""


def outcome_value(outcome: dict) -> Any:
    """The value of a probe's ``caught`` outcome, or raise its error as the built-in class it named."""
    if "value" in outcome:
        return outcome["value"]
    error = outcome["error"]
    if error["base"] == "SystemExit":
        raised: BaseException = SystemExit(error["code"] if error["code"] is not None else error["message"] or None)
    else:
        cls = getattr(builtins, error["base"], None)
        cls = cls if isinstance(cls, type) and issubclass(cls, Exception) else RuntimeError
        try:
            raised = cls(error["message"])
        except Exception:  # noqa: BLE001  built-in classes whose constructor wants other arguments
            raised = RuntimeError(error["message"])
    raised.add_note(f"raised by the submission:\n{error['traceback'].rstrip()}")
    raise raised


@dataclass
class LMSpy:
    """What the provided LM and the optimizers did during this test's ``run`` calls (they add up)."""

    adapters: Any = None
    forward_calls: int = 0
    backward_calls: int = 0
    optimizer_steps: int = 0
    models_built: int = 0
    cuda_syncs: int = 0
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    autocast_enabled: list[bool] = field(default_factory=list)
    autocast_dtypes: list[torch.dtype] = field(default_factory=list)
    logits_dtypes: list[torch.dtype] = field(default_factory=list)
    optimizer_types: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"forward": self.forward_calls, "backward": self.backward_calls, "optimizer.step": self.optimizer_steps}

    def run(self, adapter: str, *args, **kwargs) -> Any:
        """``adapters.<adapter>(*args, **kwargs)`` with the spies on; records what they saw, then
        returns its value or raises (as a built-in class) what it raised."""
        seen = run_probe(self.adapters, "benchmarking_script.spy_on_lm", TINY_MODEL, adapter, list(args), kwargs)
        for name, value in seen["records"].items():
            setattr(self, name, getattr(self, name) + (list(value) if isinstance(value, (list, tuple)) else value))
        return outcome_value(seen["outcome"])


@pytest.fixture
def lm_spy(adapters) -> LMSpy:
    """A spy for one test: call the submission through ``lm_spy.run("run_benchmark_model", ...)``."""
    return LMSpy(adapters)


_compiled: dict[tuple, dict] = {}


def compiled_once(adapters, probe: str = "torch_compile.compiled_attention", *args) -> dict:
    """The observations of ``run_probe(adapters, probe, *args)``, computed once per submission process.

    Compiling on a CPU takes seconds per graph, so tests share what was compiled (the compiled
    object stays in the submission's process, a handle here). Nothing is cached when the probe
    raises, so every test that needs it fails with that error; after the submission's process
    is restarted, it is compiled again.
    """
    generation = getattr(getattr(adapters, "_executor", None), "generation", 0)
    key = (probe, args, id(adapters), generation)
    if key not in _compiled:
        _compiled[key] = run_probe(adapters, probe, *args)
    return _compiled[key]
