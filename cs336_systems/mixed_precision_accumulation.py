"""§1.4 mixed_precision_accumulation: what happens when you add small numbers in low precision.

You write ``accumulate`` and ``accumulation_table`` (see handout/README.md, §1.4). Run the
table, then explain each number in your writeup.
"""

from __future__ import annotations

from typing import Any

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.4 mixed_precision_accumulation"

CASES = (
    (torch.float32, torch.float32),
    (torch.float16, torch.float16),
    (torch.float32, torch.float16),
    (torch.float16, torch.float32),
)
"""(accumulator dtype, addend dtype) pairs of the table, in order."""


def accumulate(value: float, steps: int, *, accumulator_dtype: torch.dtype, addend_dtype: torch.dtype) -> torch.Tensor:
    """Add ``value`` ``steps`` times to a running total; return the total.

    * The total starts as a 0-dim zero of ``accumulator_dtype``.
    * The addend is ``torch.tensor(value, dtype=addend_dtype)``: ``value`` rounded once.
    * Each addition is ``total += addend.to(accumulator_dtype)``: it happens in the
      accumulator's dtype (so with a float16 accumulator every partial sum is rounded to float16).

    Returns:
        The 0-dim total, of dtype ``accumulator_dtype``, on the CPU.

    Raises:
        ValueError: ``steps`` is not an integer >= 0.
    """
    raise not_implemented(__file__, "accumulate", _SECTION)


def accumulation_table(value: float = 0.01, steps: int = 1000) -> list[dict[str, Any]]:
    """:func:`accumulate` for every pair of ``CASES``, in order.

    Returns:
        One dict per pair: ``{"accumulator": "float32", "addend": "float16", "result": 10.0021...}``
        (dtype names without the ``torch.`` prefix; ``result`` a Python float).
    """
    raise not_implemented(__file__, "accumulation_table", _SECTION)
