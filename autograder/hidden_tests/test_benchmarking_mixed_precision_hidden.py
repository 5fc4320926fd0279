"""Hidden tests of §1.5 benchmarking_mixed_precision: train steps at an odd length; fp16 and bf16 autocast on a GPU."""

from __future__ import annotations

import pytest
import torch

from tests.checks.mixed_precision_checks import assert_autocast_dtypes, assert_compares_precisions
from tests.checks.model_spies import lm_spy  # noqa: F401 (a fixture)


def test_compare_precisions_train_steps_at_an_odd_length(lm_spy):  # noqa: F811
    assert_compares_precisions(lm_spy, context_length=7, mode="train_step", warmup_steps=0, measure_steps=1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_autocast_dtypes_on_gpu(adapters, dtype):
    assert_autocast_dtypes(adapters, dtype, "cuda")


def test_autocast_dtypes_fp16_on_cpu(adapters):
    # The CPU's autocast defaults to bfloat16: only a dtype other than the default shows that
    # autocast_dtypes passes its dtype on.
    assert_autocast_dtypes(adapters, torch.float16, "cpu")
