"""Visible tests of §1.5 benchmarking_mixed_precision: autocast's dtypes on the ToyModel, fp32 against bf16 timing.

compare_precisions runs a tiny LM on the CPU while a spy next to your code records, for each
forward pass, whether autocast was on and to which dtype (tests/checks/model_spies.py).
"""

from __future__ import annotations

import torch

from tests.checks.mixed_precision_checks import assert_autocast_dtypes, assert_compares_precisions
from tests.checks.model_spies import lm_spy  # noqa: F401 (a fixture)


def test_autocast_dtypes_bf16_on_cpu(adapters):
    assert_autocast_dtypes(adapters, torch.bfloat16, "cpu")


def test_compare_precisions_runs_fp32_then_bf16(lm_spy):  # noqa: F811
    assert_compares_precisions(lm_spy, context_length=8, mode="forward_backward", warmup_steps=1, measure_steps=2)
