"""Probes for the benchmarking_script tests: watch the provided LM inside the submission's benchmark.

Read by tests/checks/model_spies.py (``lm_spy``), the CLI tests, and the nsys_profile probes (which
share ``caught``). Each probe runs a call of the submission with its spies on and returns what
they saw; the spies are removed before it returns, so later calls see the plain classes.
Errors come back as data (see ``caught``), so that what was recorded before an error reaches
the harness too.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..tracebacks import student_traceback


def caught(fn: Callable[..., Any], *args, **kwargs) -> dict:
    """``{"value": fn(*args, **kwargs)}``, or ``{"error": {"base", "message", "code", "traceback"}}``.

    ``base`` is the nearest built-in class of what ``fn`` raised (Exception or SystemExit);
    ``code`` is a SystemExit's integer code (else None).
    """
    try:
        return {"value": fn(*args, **kwargs)}
    except (Exception, SystemExit) as error:  # noqa: BLE001  the harness decides what an error means
        base = next(cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins")
        try:
            message = str(error)
        except Exception:  # noqa: BLE001  a student exception whose __str__ fails
            message = "<the exception's message could not be read>"
        code = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else None
        return {"error": {"base": base, "message": message[:20_000], "code": code,
                          "traceback": student_traceback(error)[-20_000:]}}


def new_records() -> dict[str, Any]:
    """What ``spy_on_lm`` records: counters, and one entry per forward pass or optimizer step in the lists."""
    return {"forward_calls": 0, "backward_calls": 0, "optimizer_steps": 0, "models_built": 0, "cuda_syncs": 0,
            "input_shapes": [], "autocast_enabled": [], "autocast_dtypes": [], "logits_dtypes": [],
            "optimizer_types": []}


@contextlib.contextmanager
def lm_spies(lm_class: type, records: dict[str, Any]):
    """Patch ``lm_class`` (__init__, forward), hook every optimizer step and count torch.cuda.synchronize()."""
    original_init, original_forward = lm_class.__init__, lm_class.forward
    real_synchronize = torch.cuda.synchronize

    def counting_init(self, *args, **kwargs):
        records["models_built"] += 1
        original_init(self, *args, **kwargs)

    def counting_forward(self, token_ids, *args, **kwargs):
        records["forward_calls"] += 1
        records["input_shapes"].append(tuple(token_ids.shape))
        device_type = token_ids.device.type
        records["autocast_enabled"].append(torch.is_autocast_enabled(device_type))
        records["autocast_dtypes"].append(torch.get_autocast_dtype(device_type))
        logits = original_forward(self, token_ids, *args, **kwargs)
        records["logits_dtypes"].append(logits.dtype)
        if logits.requires_grad:

            def count_backward(grad):
                records["backward_calls"] += 1

            logits.register_hook(count_backward)
        return logits

    def counting_synchronize(*args, **kwargs):
        records["cuda_syncs"] += 1
        return real_synchronize(*args, **kwargs)

    def count_step(optimizer, args, kwargs):
        records["optimizer_steps"] += 1
        records["optimizer_types"].append(type(optimizer).__name__)

    lm_class.__init__, lm_class.forward = counting_init, counting_forward
    torch.cuda.synchronize = counting_synchronize
    handle = register_optimizer_step_post_hook(count_step)
    try:
        yield records
    finally:
        handle.remove()
        torch.cuda.synchronize = real_synchronize
        lm_class.__init__, lm_class.forward = original_init, original_forward


def spy_on_lm(load_adapters: Callable[[], Any], model_overrides: dict, adapter: str, args: list, kwargs: dict) -> dict:
    """Run ``adapters.<adapter>(*args, **kwargs)`` with the provided TransformerLM class spied on.

    The class is found as the type of ``get_transformer_lm(model_overrides=model_overrides)``
    (built before the spies go on, so it is not counted). Returns ``{"outcome": caught(...),
    "records": new_records() as filled in}``: forward passes with their input shapes, autocast
    state and logits dtype, backward passes (a gradient reaching the logits), optimizer steps
    and their optimizer classes, models built, and torch.cuda.synchronize() calls.
    """
    adapters = load_adapters()
    lm_class = type(adapters.get_transformer_lm(model_overrides=model_overrides))
    with lm_spies(lm_class, new_records()) as records:
        outcome = caught(getattr(adapters, adapter), *args, **kwargs)
    return {"outcome": outcome, "records": records}


def run_cli(load_adapters: Callable[[], Any], argv: list[str]) -> dict:
    """Run ``adapters.run_benchmarking_cli(argv)`` with stdout and stderr captured.

    Returns ``{"outcome": caught(...), "stdout": str, "stderr": str}``; a SystemExit (argparse's
    way out) is an error with its ``code``.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        outcome = caught(load_adapters().run_benchmarking_cli, list(argv))
    return {"outcome": outcome, "stdout": out.getvalue(), "stderr": err.getvalue()}


PROBES = {"spy_on_lm": spy_on_lm, "run_cli": run_cli}
