"""The correctness gate: a submission is timed only if its outputs and gradients match a reference.

Staff read this file to know what "correct" means on the leaderboard: the inputs it is checked
on and the comparison. The reference is the tests' truth (harness/flash_reference.py
``attention_float64``: plain attention with autograd in float64, a chunk of queries at a time,
so the (batch, n, n) score matrix is never held at once), and the tolerances are stated in the
tests' model (harness/flash_tolerances.py ``GATE_TOLERANCES``, measured for the leaderboard's shape).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from leaderboard.config import Problem
from harness.assertions import norm_check_applies
from harness.flash_reference import AttentionResult
from harness.flash_tolerances import Tolerance

GATED = ("O", "dQ", "dK", "dV")  # what the gate compares: L stays inside the Function here


def derived_seed(seed: int, label: str) -> int:
    """A seed for one set of inputs, from the run's seed (which the parent chooses) and a label."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{label}".encode()).digest()[:8], "big") >> 1


def check_inputs(problem: Problem, seed: int, label: str, count: int) -> torch.Tensor:
    """``count`` random tensors of the problem's shape, stacked: (count, batch, n, d).

    The parent and the worker both call this with the same seed and label and get the same
    values (a fresh generator on the problem's device), so the parent can recompute the
    reference for any input the worker was checked on, without trusting the worker's copy.
    """
    generator = torch.Generator(device=problem.device).manual_seed(derived_seed(seed, label))
    return torch.randn((count, *problem.shape), dtype=problem.dtype, device=problem.device, generator=generator)


def checked_batch_element(problem: Problem, seed: int, label: str) -> int:
    """Which batch element the reference is compared on for the inputs called ``label``."""
    return derived_seed(seed, label + "/batch") % problem.batch


@dataclass
class Comparison:
    """How far ``got`` is from ``want``; ``problem`` is None when within tolerance."""

    name: str
    rel_l2: float
    max_abs: float
    max_want: float
    problem: str | None

    def as_dict(self) -> dict:
        return {"rel_l2": self.rel_l2, "max_abs": self.max_abs, "max_ref": self.max_want}


def compare(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> Comparison:
    """Compare one output or gradient with the reference, under ``tol`` (the rule is
    harness/flash_tolerances.py's: element bound atol + rtol * |want| + max_frac * max|want|, and
    the relative L2 error at most ``tol.norm``)."""
    if got.shape != want.shape:
        return Comparison(name, math.inf, math.inf, 0.0, f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    gotf = got.detach().double()
    if not torch.isfinite(gotf).all():
        bad = int((~torch.isfinite(gotf)).sum())
        return Comparison(name, math.inf, math.inf, 0.0, f"{name} has {bad} non-finite values (NaN or inf)")
    diff = (gotf - want).abs()
    rel_l2 = float(diff.norm() / want.norm().clamp_min(1e-30))
    max_abs = float(diff.max())
    max_want = float(want.abs().max())
    limit = tol.atol + tol.rtol * want.abs() + tol.max_frac * max_want  # per element
    over = diff > limit
    too_far = tol.norm is not None and norm_check_applies(want, tol.atol) and rel_l2 > tol.norm
    problem = None
    if too_far or bool(over.any()):
        worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        problem = (
            f"{name}: relative L2 error {rel_l2:.2e} (limit {'none' if tol.norm is None else f'{tol.norm:.0e}'}); "
            f"max abs error {max_abs:.3g} at index {worst} (limit {_element_rule(tol)} = "
            f"{float(limit.flatten()[diff.argmax()]):.3g}); {int(over.sum())} of {diff.numel()} elements over that limit"
        )
    return Comparison(name, rel_l2, max_abs, max_want, problem)


def _element_rule(tol: Tolerance) -> str:
    """The element bound in words, only its nonzero terms: "0.05 x max|ref|"."""
    terms = [f"{tol.atol:g}" if tol.atol else "", f"{tol.rtol:g} x |ref|" if tol.rtol else "",
             f"{tol.max_frac} x max|ref|" if tol.max_frac else ""]
    return " + ".join(term for term in terms if term) or "0"


def compare_all(got: dict[str, torch.Tensor], want: AttentionResult, tolerances: dict[str, Tolerance]) -> list[Comparison]:
    """Compare O, dQ, dK and dV with the reference's; returns one Comparison per name, in that order."""
    return [compare(name, got[name], getattr(want, name), tolerances[name]) for name in GATED]
