"""§1.4 mixed_precision_accumulation: what happens when you add small numbers in low precision.

Reference solution. Adding 0.01 a thousand times should give 10. In float16 (10 mantissa
bits) the spacing of representable numbers near 8 is 2**-7 = 0.0078, so each addition of
0.01 rounds; the running sum drifts to 9.9531. Keeping the *accumulator* in float32 fixes
almost all of it even when the addends are float16 (10.0021: what is left is the error of
rounding 0.01 itself to float16). This is why mixed-precision training keeps master weights,
optimizer state and reductions in float32.
"""

from __future__ import annotations

from typing import Any

import torch

CASES = (
    (torch.float32, torch.float32),
    (torch.float16, torch.float16),
    (torch.float32, torch.float16),
    (torch.float16, torch.float32),
)
"""(accumulator dtype, addend dtype) pairs of the table, in order."""


def accumulate(value: float, steps: int, *, accumulator_dtype: torch.dtype, addend_dtype: torch.dtype) -> torch.Tensor:
    """Add ``value`` (rounded to ``addend_dtype``) ``steps`` times to a zero of ``accumulator_dtype``.

    Each addition is ``total += addend.to(accumulator_dtype)``: it happens in the accumulator's
    dtype. Returns the 0-dim total, of ``accumulator_dtype``.
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0; got {steps!r}")
    total = torch.zeros((), dtype=accumulator_dtype)  # ()
    addend = torch.tensor(value, dtype=addend_dtype)  # (), rounded once to the addend's dtype
    for _ in range(steps):
        total += addend.to(accumulator_dtype)
    return total


def accumulation_table(value: float = 0.01, steps: int = 1000) -> list[dict[str, Any]]:
    """One row per pair of ``CASES``: {"accumulator", "addend" (dtype names such as "float16"), "result" (float)}."""
    return [
        {"accumulator": _name(acc), "addend": _name(add),
         "result": accumulate(value, steps, accumulator_dtype=acc, addend_dtype=add).item()}
        for acc, add in CASES
    ]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
