"""Hidden tests of §1.4 mixed_precision_accumulation: no steps, a large sum in float16, bad steps."""

from __future__ import annotations

import pytest
import torch

from tests.checks.mixed_precision_checks import assert_accumulates


@pytest.mark.parametrize(("value", "steps", "accumulator", "addend"), [
    (0.5, 0, torch.float16, torch.float32), (0.01, 5000, torch.float16, torch.float16),
    (0.7, 11, torch.float64, torch.bfloat16)], ids=["no-steps", "fp16-stalls", "fp64"])
def test_accumulate_edge_cases(adapters, value, steps, accumulator, addend):
    assert_accumulates(adapters, value, steps, accumulator, addend)


def test_accumulate_rejects_negative_steps(adapters):
    with pytest.raises(ValueError):
        adapters.run_accumulate(0.01, -1, accumulator_dtype=torch.float32, addend_dtype=torch.float32)
