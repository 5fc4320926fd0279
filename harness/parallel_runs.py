"""Run part 2's probes and compare the ranks' states with the truth: what every part-2 check shares.

Read by harness/{ddp,optimizer_state_sharding,fsdp}_checks.py, tests/checks/distributed_communication_checks.py
and harness/training_step.py. Only the settings go out to the ranks (executor/probes/) and only their
observations come back: ``ranks_of`` returns the ranks' results or raises AssertionError naming the
failed rank (or the hang). Everything here runs in the harness.
"""

from __future__ import annotations

import json
import os

import torch

from harness.assertions import assert_close
from executor.probes import parallel_models as models
from executor.probes.parallel_launch import COLLECTIVES

RUN_TIMEOUT_S = 60.0
COLLECTIVE_NAMES = frozenset(COLLECTIVES)
"""The event names of logged collectives (their aliases log under names of this set)."""
FP32_TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}


def batch(model: str, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of ``size`` rows for model ``model``."""
    generator = torch.Generator().manual_seed(seed)
    if model == "lm":
        vocab = models.LM_OVERRIDES["vocab_size"]
        tokens = torch.randint(0, vocab, (size, 9), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]
    if model == "fsdp_chain":
        tokens = torch.randint(0, models.FSDPChain.VOCAB, (size, 7), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]
    return torch.randn(size, 10, generator=generator), torch.randn(size, 5, generator=generator)


def ranks_of(result: dict, what: str) -> list[dict]:
    """The ranks' results of one run; AssertionError naming each failed rank, or the hang.

    With ``CS336_RANK_EXIT_LOG`` set (a staff measurement), appends one JSON line per run to that
    file: the ranks' exit codes, so that aborts in the teardown after a report can be counted.
    """
    log = os.environ.get("CS336_RANK_EXIT_LOG")
    if log:
        with open(log, "a") as file:
            file.write(json.dumps({"what": what, "exit_codes": result.get("exit_codes"),
                                   "reported": [r is not None for r in result["ranks"]]}) + "\n")
    if result["timed_out"]:
        raise AssertionError(
            f"{what}: the ranks did not finish within {result['timeout_s']:.0f} s (a hang: a rank waits in a "
            "collective that another rank never calls, or for a handle that is never waited on); "
            + "; ".join(f"rank {r}: {text.splitlines()[-1] if text else ''}" for r, text in result["errors"].items()))
    for rank, (kind, message) in sorted(result.get("error_types", {}).items()):
        if kind == "NotImplementedError":  # a stub: say which one, as a call in one process would
            raise NotImplementedError(f"{message} (raised on rank {rank} of {what})")
    if result["errors"]:
        rank, text = sorted(result["errors"].items())[0]
        raise AssertionError(f"{what}: rank {rank} failed:\n{text}")
    return result["ranks"]


def assert_state_close(got: dict, expected: dict, *, what: str, context: str, exact: bool = False,
                       tolerance: dict | None = None) -> None:
    """Every entry of ``expected`` ({name: tensor or None}) is in ``got`` and close to it (None stays None)."""
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{what}: {missing} missing ({context})"
    for name, value in expected.items():
        if value is None:
            assert got[name] is None, (
                f"{what} of {name} must stay None (it got no gradient in the whole-batch run); got a tensor "
                f"({context})")
            continue
        assert got[name] is not None, f"{what} of {name} is None; expected a tensor ({context})"
        if exact:
            assert torch.equal(got[name], value), (
                f"{what} of {name} differs from rank 0's (max |diff| "
                f"{(got[name].float() - value.float()).abs().max().item():.3g}) ({context})")
        else:
            assert_close(got[name], value, **(tolerance or FP32_TOLERANCE), what=f"{what} of {name}", context=context)


STATE_RTOL = 1e-4
"""Optimizer state is compared per tensor at its own scale: atol = STATE_RTOL * max |expected|."""


def assert_optimizer_state_close(got: dict, expected: dict, *, what: str, context: str) -> None:
    """Every tensor of ``expected`` ({"<param>.<key>": tensor}) is in ``got`` and close at its own scale.

    A second moment (AdamW's exp_avg_sq) is about the square of a gradient, often 1e-8 or less,
    so the parameters' absolute tolerance would accept any value there, zeros included.
    """
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{what}: {missing} missing ({context})"
    for name, value in expected.items():
        scale = value.abs().max().item() if value.numel() else 0.0
        assert_close(got[name], value, atol=STATE_RTOL * scale, rtol=STATE_RTOL, what=f"{what} {name}",
                     context=context)


DDP_TOLERANCE = {torch.float32: FP32_TOLERANCE, torch.float64: {"atol": 1e-12, "rtol": 1e-10},
                 torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}, torch.float16: {"atol": 2e-3, "rtol": 2e-3}}
"""A data-parallel run against the whole-batch run in the same dtype: only the order of the sums
differs, so each dtype gets a few of its own rounding steps. float64's bound is far below
float32's rounding (about 6e-8 relative): gradients that went through a float32 buffer fail it."""


def state_in_dtype(state: dict[str, torch.Tensor], dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """``state``'s floating tensors in ``dtype``; in a dtype finer than float32, moved off float32's grid.

    The models are built in float32, so their values cast to float64 survive a float32 round
    trip exactly; a tiny seeded offset (about 1e-6 of each value) gives them digits float32
    cannot hold, so that a broadcast or an all-reduce through a float32 buffer changes them.
    """
    generator = torch.Generator().manual_seed(seed)
    finer = torch.finfo(dtype).eps < torch.finfo(torch.float32).eps
    out = {}
    for name, value in state.items():
        if not value.is_floating_point():
            out[name] = value.clone()
            continue
        value = value.to(dtype)
        if finer:
            value = value * (1 + 1e-6 * torch.randn(value.shape, generator=generator, dtype=dtype))
        out[name] = value
    return out


KEEP_GRADIENT_DTYPE = ("Allocate each buffer with the gradients' dtype (torch.empty(n) is the default dtype, "
                       "float32) and write the averages back into each .grad in its own dtype")


def assert_dtypes_kept(got: dict, dtype: torch.dtype, *, what: str, context: str,
                       advice: str = KEEP_GRADIENT_DTYPE) -> None:
    """Every floating tensor of ``got`` ({name: tensor or None}) is in ``dtype``, the model's."""
    other = {name: str(t.dtype).removeprefix("torch.") for name, t in got.items()
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype}
    name = str(dtype).removeprefix("torch.")
    assert not other, (
        f"{what} must keep the dtype of its parameter ({name}: the whole model is {name}); got {other} ({context}). "
        f"{advice}")


def step_events(events: list[tuple], step: int) -> list[tuple]:
    """The events of training step ``step`` (from its ("step", step) marker to the next step's)."""
    start = events.index(("step", step))
    following = [i for i, e in enumerate(events) if e[0] == "step" and i > start]
    return events[start:following[0] if following else len(events)]


def describe(events: list[tuple]) -> str:
    return "\n  ".join(map(str, events))


def assert_every_handle_waited(ranks: list[dict], steps: int, context: str) -> None:
    """Each asynchronous collective a step launched was waited on before that step's synchronisation ended.

    Read from the probe's own log, so the verdict does not depend on which thread won: a
    handle's ``wait()``, a ``get_future()`` waited on (directly, through a future chained by
    ``then``, or ``torch.futures.wait_all``), or ``is_completed()``/``done()`` answering True,
    each logged before ("synced", step). A handle never waited on leaves the gradient to
    whichever of the communication thread and the optimizer writes it last.
    """
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(steps):
            start, synced = events.index(("step", step)), events.index(("synced", step))
            waited = {e[3] for e in events[start:synced] if e[0] == "wait"}
            missed = [(i, e) for i, e in enumerate(events[start:synced], start)
                      if e[0] in COLLECTIVE_NAMES and e[3] and i not in waited]
            assert not missed, (
                f"{context}; rank {rank}, step {step}: {len(missed)} asynchronous collective(s) launched in this step "
                f"were never waited on before finish_gradient_synchronization returned: "
                f"{[f'{e[0]} of {e[1]} elements' for _, e in missed]}. Until its handle's wait() (or its future's) "
                f"returns, a collective may still be writing the gradient: its value then depends on a race. Wait "
                f"on every handle the step launched before returning; events of step {step}:\n  "
                f"{describe(step_events(events, step))}")
