"""The correctness gate: a submission is timed only if its outputs and gradients match a reference.

Staff read this file to know what "correct" means on the leaderboard. The reference is plain
softmax attention computed with autograd in float64, a chunk of queries at a time, so that the
(batch, n, n) score matrix is never held at once (32 GiB in float64 at the leaderboard shape)
and no TF32 setting a submission may have switched on can leak into it. Softmax is row-wise,
so chunking over queries is exact.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from leaderboard.config import REFERENCE_QUERY_CHUNK, Problem, Tolerance

MASKED_SCORE = -1.0e6  # the contract's additive causal mask


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


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, is_causal: bool, chunk: int = REFERENCE_QUERY_CHUNK
) -> dict[str, torch.Tensor]:
    """Attention and its gradients under ``do``, in float64: {"O", "dQ", "dK", "dV"}.

    q, do: (batch, n_queries, d); k, v: (batch, n_keys, d); any float dtype, any device.
    Scale 1/sqrt(d); with ``is_causal`` query i sees key j when j <= i, and masked scores get
    -1e6 added. Memory: about four (batch, chunk, n_keys) float64 tensors at a time.
    """
    batch, n_queries, d = q.shape
    n_keys = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    with torch.enable_grad():
        kf = k.detach().double().requires_grad_()  # (batch, n_keys, d)
        vf = v.detach().double().requires_grad_()  # (batch, n_keys, d)
        out = torch.empty((batch, n_queries, d), dtype=torch.float64, device=q.device)
        dq = torch.empty_like(out)
        k_pos = torch.arange(n_keys, device=q.device)  # (n_keys,)
        for start in range(0, n_queries, chunk):
            rows = slice(start, min(start + chunk, n_queries))
            qc = q[:, rows].detach().double().requires_grad_()  # (batch, chunk, d)
            scores = qc @ kf.transpose(1, 2) * scale  # (batch, chunk, n_keys)
            if is_causal:
                q_pos = torch.arange(rows.start, rows.stop, device=q.device)  # (chunk,)
                scores = scores + torch.where(q_pos[:, None] >= k_pos[None, :], 0.0, MASKED_SCORE).double()
            oc = torch.softmax(scores, dim=-1) @ vf  # (batch, chunk, d)
            oc.backward(do[:, rows].double())
            out[:, rows] = oc.detach()
            dq[:, rows] = qc.grad
            del scores, oc, qc
    return {"O": out, "dQ": dq, "dK": kf.grad, "dV": vf.grad}


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
    """Compare one output or gradient with the reference (see ``Tolerance`` for the rule)."""
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
    limit = tol.max_abs_frac * max_want
    problem = None
    if rel_l2 > tol.rel_l2 or max_abs > limit:
        worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        over = int((diff > limit).sum())
        problem = (
            f"{name}: relative L2 error {rel_l2:.2e} (limit {tol.rel_l2:.0e}); max abs error "
            f"{max_abs:.3g} at index {worst} (limit {tol.max_abs_frac} x max|ref| = {limit:.3g}); "
            f"{over} of {diff.numel()} elements over that limit"
        )
    return Comparison(name, rel_l2, max_abs, max_want, problem)


def compare_all(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], tolerances: dict[str, Tolerance]) -> list[Comparison]:
    """Compare O, dQ, dK and dV; returns one Comparison per name, in that order."""
    return [compare(name, got[name], want[name], tolerances[name]) for name in ("O", "dQ", "dK", "dV")]
