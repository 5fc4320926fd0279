"""The one assertion helper of the kit: compare tensors and say exactly how they differ.

Read by every test that compares a submission's tensors with the truth (visible and hidden).
A failure message names what was compared and under which conditions (``context``: shape,
dtype, flags, seed), then gives the numbers a student needs to start debugging:

    O mismatch [FlashAttentionTriton.apply(Q, K, V, is_causal=True) with batch=2, ...]
      actual: shape (2, 17, 16), dtype torch.float16, strides (272, 16, 1)
      tolerance: |actual - expected| <= atol + rtol * |expected| with atol=0.01, rtol=0.01
      max abs error 0.3125 at index (1, 16, 3) (actual 0.1 vs expected 0.4125)
      max rel error 0.7575 at index (1, 16, 3) (over elements with |expected| > atol)
      34 of 544 elements (6.25%) outside tolerance; first at index (0, 9, 0): actual ... vs expected ...
      non-finite values in actual: 0

Comparisons happen in float64, so no comparison adds rounding of its own.
"""

from __future__ import annotations

import re

import torch

__tracebackhide__ = True  # a failure's traceback ends at the test's call of these helpers, not inside them

# A case's rerun command inside a context (harness/flash_cases.py's FlashCase.repro)
_RERUN = re.compile(r'; rerun: ((?:TRITON_INTERPRET=1 )?\.venv/bin/python -m tests\.checks\.flash_repro \S+ \S+ "[^"]*")')


def place_rerun(message: str) -> str:
    """``message`` with each case's rerun command (``; rerun: ...`` inside a line) moved to a line
    of its own, ``  rerun: ...``, right below that line: a command to copy, not a clause to find."""
    lines = []
    for line in message.split("\n"):
        commands = _RERUN.findall(line)
        lines.append(_RERUN.sub("", line))
        lines += [f"  rerun: {command}" for command in commands]
    return "\n".join(lines)


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """Turn a flat index into a multi-index of ``shape`` (row-major)."""
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def describe(tensor: torch.Tensor) -> str:
    """One line: shape, dtype, strides and device of ``tensor``."""
    return (
        f"shape {tuple(tensor.shape)}, dtype {tensor.dtype}, strides {tuple(tensor.stride())}, "
        f"device {tensor.device}"
    )


def assert_meta(
    tensor: object,
    *,
    shape: tuple[int, ...] | None = None,
    dtype: torch.dtype | None = None,
    what: str = "tensor",
    context: str = "",
) -> None:
    """Fail unless ``tensor`` is a torch.Tensor with the given shape and dtype (None: any)."""
    where = f" [{context}]" if context else ""
    if not isinstance(tensor, torch.Tensor):
        raise AssertionError(place_rerun(f"{what}{where}: expected a torch.Tensor, got {type(tensor).__name__}"))
    problems = []
    if shape is not None and tuple(tensor.shape) != tuple(shape):
        problems.append(f"shape {tuple(tensor.shape)}, expected {tuple(shape)}")
    if dtype is not None and tensor.dtype != dtype:
        problems.append(f"dtype {tensor.dtype}, expected {dtype}")
    if problems:
        raise AssertionError(place_rerun(f"{what}{where}: " + "; ".join(problems) + f" (actual: {describe(tensor)})"))


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    what: str = "tensor",
    context: str = "",
) -> None:
    """Fail unless |actual - expected| <= atol + rtol * |expected| everywhere, and actual is finite.

    ``actual`` and ``expected`` must have the same shape; any dtypes and devices (both are moved
    to the CPU in float64). ``what`` names the quantity ("O", "L", "dQ"); ``context`` says under
    which conditions it was computed, in words a student can rerun. NaN or Inf in ``actual``
    always fails, even where ``expected`` has the same value.
    """
    assert_meta(actual, shape=tuple(expected.shape), what=what, context=context)
    a = actual.detach().to(device="cpu", dtype=torch.float64)
    e = expected.detach().to(device="cpu", dtype=torch.float64)
    finite = torch.isfinite(a)
    error = (a - e).abs()
    error = torch.where(finite, error, torch.full_like(error, float("inf")))
    allowed = atol + rtol * e.abs()
    bad = (error > allowed) | ~finite  # NaN compares False: count non-finite values explicitly
    n_bad = int(bad.sum())
    if n_bad == 0:
        return

    def at(flat: int) -> str:
        index = _index(flat, a.shape)
        return f"index {index} (actual {a[index].item():.6g} vs expected {e[index].item():.6g})"

    # Relative error only where |expected| > atol: near zero it says nothing.
    meaningful = e.abs() > atol
    relative = torch.where(meaningful, error / e.abs().clamp_min(1e-30), torch.zeros_like(error))
    max_abs_flat = int(error.flatten().argmax())
    max_rel_flat = int(relative.flatten().argmax())
    first_bad_flat = int(bad.flatten().nonzero()[0, 0])
    n_nonfinite = int((~finite).sum())
    total = a.numel()
    lines = [
        f"{what} mismatch" + (f" [{context}]" if context else ""),
        f"  actual: {describe(actual)}",
        f"  tolerance: |actual - expected| <= atol + rtol * |expected| with atol={atol:g}, rtol={rtol:g}",
        f"  max abs error {error.flatten()[max_abs_flat].item():.6g} at {at(max_abs_flat)}",
        (
            f"  max rel error {relative.flatten()[max_rel_flat].item():.6g} at index {_index(max_rel_flat, a.shape)}"
            f" (over elements with |expected| > atol)"
            if bool(meaningful.any())
            else "  max rel error: n/a (every |expected| <= atol)"
        ),
        f"  {n_bad} of {total} elements ({100.0 * n_bad / total:.3g}%) outside tolerance; first at {at(first_bad_flat)}",
        f"  non-finite values in actual: {n_nonfinite}",
    ]
    raise AssertionError(place_rerun("\n".join(lines)))


def norm_check_applies(expected: torch.Tensor, atol: float) -> bool:
    """Whether a whole-tensor bound judges a comparison with ``expected``: its RMS is at least
    ``atol`` (below that, as for an exactly zero gradient, only the element-wise bound judges)."""
    return expected.numel() > 0 and float(expected.double().pow(2).mean().sqrt()) >= atol


def assert_norm_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    what: str = "tensor",
    context: str = "",
) -> None:
    """Fail if ||actual - expected|| > rtol * ||expected|| (Frobenius norms, float64 on the CPU),
    where the expected tensor's RMS is at least ``atol`` (``norm_check_applies``; smaller ones are
    judged element by element only). Catches an error that is small in every element but points
    the same way everywhere (a gradient 2% off)."""
    a = actual.detach().to(device="cpu", dtype=torch.float64)
    e = expected.detach().to(device="cpu", dtype=torch.float64)
    if not norm_check_applies(e, atol):
        return
    relative = float((a - e).norm() / e.norm())
    if relative <= rtol:
        return
    raise AssertionError(place_rerun(
        f"{what} mismatch" + (f" [{context}]" if context else "") + "\n"
        f"  every element is within the element-wise tolerance, but the whole tensor is off by "
        f"{100 * relative:.2f}%: ||actual - expected|| / ||expected|| = {relative:.3g}, allowed {rtol:g}\n"
        f"  rounding errors of a correct kernel point in all directions and stay under that; an error this size "
        f"that survives in the norm is systematic (a scale, a rounded statistic, a missing term)"
    ))
