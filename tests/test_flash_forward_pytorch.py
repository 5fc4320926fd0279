"""Visible tests for §2.3 flash_forward_pytorch: your tiled PyTorch FlashAttention-2 forward.

Each test calls ``adapters.get_flashattention_autograd_function_pytorch().apply(Q, K, V, is_causal)``
and compares O and the saved logsumexp L with plain attention in float64
(harness/flash_reference.py), under the tolerances of harness/flash_tolerances.py. A failure names
the case in one line you can rerun (see harness/flash_cases.py) and says by how much it missed.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note

from harness import gpus
from tests.checks.flash_bad_inputs import BAD_INPUTS, assert_rejects
from harness.flash_cases import FlashCase, check_forward, flash_case_strategy
from harness.hypothesis_profiles import FUZZ

DEVICE = "cuda" if gpus.count() else "cpu"


def _function(adapters):
    return adapters.get_flashattention_autograd_function_pytorch()


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_pytorch_cs336_shape(adapters, is_causal):
    """The CS336 case: batch 4, 128 queries, 128 keys, d 64, float32."""
    case = FlashCase(batch=4, n_queries=128, n_keys=128, d=64, dtype=torch.float32, is_causal=is_causal, device=DEVICE)
    check_forward(_function(adapters), case, "pytorch")


@given(
    case=flash_case_strategy(
        # Plain PyTorch handles bfloat16 on any device, so it is fuzzed everywhere.
        dtypes=tuple(dict.fromkeys(FUZZ.dtypes + (torch.bfloat16,))),
        max_batch=FUZZ.max_batch,
        max_tokens=FUZZ.max_tokens,
        device=FUZZ.device,
    )
)
def test_flash_forward_pytorch_any_shape(adapters, case):
    """Any batch, n_queries != n_keys, odd sizes, every d and dtype, causal or not, strided inputs."""
    function = _function(adapters)
    note(f"rerun: {case.command('pytorch', 'forward')}")
    check_forward(function, case, "pytorch")


def test_flash_forward_pytorch_beyond_float16_range(adapters):
    """Float32 inputs with |V| near 1e5, past float16's largest value (65504): an output
    accumulator (or O) kept in 16 bits overflows to inf. Keep the arithmetic in float32."""
    case = FlashCase(batch=2, n_queries=70, n_keys=150, d=32, dtype=torch.float32, is_causal=True, layout="sliced",
                     seed=5, device=DEVICE, v_scale=1e5)
    check_forward(_function(adapters), case, "pytorch")


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[bad.name for bad in BAD_INPUTS])
def test_flash_forward_pytorch_rejects_bad_input(adapters, bad):
    """Malformed inputs raise ValueError or TypeError (RuntimeError accepted) instead of returning."""
    assert_rejects(_function(adapters), bad)
