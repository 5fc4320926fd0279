"""Visible tests of §1.4 mixed_precision_accumulation: the four sums of CS336's table, and odd values and dtypes."""

from __future__ import annotations

import pytest
import torch

from tests.checks.mixed_precision_checks import accumulated, assert_accumulates

CASES = [(torch.float32, torch.float32), (torch.float16, torch.float16), (torch.float32, torch.float16),
         (torch.float16, torch.float32)]


def test_accumulation_table_matches_the_additions(adapters):
    rows = adapters.run_accumulation_table()
    expected = [{"accumulator": str(a).removeprefix("torch."), "addend": str(b).removeprefix("torch."),
                 "result": accumulated(0.01, 1000, a, b).item()} for a, b in CASES]
    assert rows == expected, f"accumulation_table() must return, in order, {expected}; got {rows}"
    assert [round(row["result"], 4) for row in rows] == [10.0001, 9.9531, 10.0021, 9.9531]


@pytest.mark.parametrize(("value", "steps", "accumulator", "addend"), [
    (0.1, 37, torch.bfloat16, torch.float32), (0.3, 5, torch.float16, torch.float16),
    (1e-4, 300, torch.float32, torch.bfloat16)], ids=["bf16-acc", "fp16", "bf16-addend"])
def test_accumulate_odd_values_and_dtypes(adapters, value, steps, accumulator, addend):
    assert_accumulates(adapters, value, steps, accumulator, addend)
