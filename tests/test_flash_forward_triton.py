"""Visible tests for §2.4 flash_forward_triton: your Triton FlashAttention-2 forward kernel.

Each test calls ``adapters.get_flashattention_autograd_function_triton().apply(Q, K, V, is_causal)``
and compares O and the saved logsumexp L with plain attention in float64
(harness/flash_reference.py), under the tolerances of harness/flash_tolerances.py. Without a GPU
the kernel runs under Triton's interpreter (slow, so shapes stay small there) in float32 and
float16; with a GPU, bfloat16 and larger shapes are fuzzed too. A failure names the case in one
line you can rerun (see harness/flash_cases.py) and says by how much it missed.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, note

from harness import gpus
from tests.checks.flash_bad_inputs import BAD_INPUTS, assert_rejects
from harness.flash_cases import FlashCase, check_forward, first_case, flash_case_strategy
from harness.autotune_configs import EVERY_CONFIG_SHAPE
from harness.hypothesis_profiles import FUZZ

DEVICE = "cuda" if gpus.count() else "cpu"
pytestmark = pytest.mark.triton  # every test here runs your Triton kernel (skipped where Triton is missing)


def _function(adapters):
    return adapters.get_flashattention_autograd_function_triton()


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_triton_cs336_shape(adapters, is_causal):
    """The CS336 case: batch 4, 128 queries, 128 keys, d 64, float32."""
    case = FlashCase(batch=4, n_queries=128, n_keys=128, d=64, dtype=torch.float32, is_causal=is_causal, device=DEVICE)
    check_forward(_function(adapters), case, "triton")


@given(
    case=flash_case_strategy(
        dtypes=FUZZ.dtypes, max_batch=FUZZ.max_batch, max_tokens=FUZZ.max_tokens, device=FUZZ.device
    )
)
@example(case=first_case(FUZZ.device))  # most bugs fail here, before any search or shrinking
def test_flash_forward_triton_any_shape(adapters, case):
    """Any batch, n_queries != n_keys, odd sizes, every d, causal or not, strided inputs."""
    function = _function(adapters)
    note(f"rerun: {case.command('triton', 'forward')}")
    check_forward(function, case, "triton")


def test_flash_forward_triton_beyond_float16_range(adapters):
    """Float32 inputs with |V| near 1e5, past float16's largest value (65504): an output
    accumulator kept in 16 bits overflows to inf. Keep acc (and m, l) in float32."""
    case = FlashCase(batch=1, n_queries=40, n_keys=100, d=32, dtype=torch.float32, is_causal=True, layout="sliced",
                     seed=5, device=DEVICE, v_scale=1e5)
    check_forward(_function(adapters), case, "triton")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_triton_half_precision_gpu(adapters, dtype, is_causal):
    """Half precision at a size where tiles and masks matter: (4, 1000, 1537, 64)."""
    case = FlashCase(batch=4, n_queries=1000, n_keys=1537, d=64, dtype=dtype, is_causal=is_causal, seed=7, device="cuda")
    check_forward(_function(adapters), case, "triton")


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_triton_every_autotune_config(adapters, each_autotune_config, is_causal):
    """Each config of your @triton.autotune kernels, one after another, on ragged tiles: 130 queries
    and 203 keys (70 and 45 under the interpreter). Your autotuner may keep any of them, so every
    one must be right (handout §2.4); the other tests run one config each."""
    case = FlashCase(**EVERY_CONFIG_SHAPE, dtype=torch.float32, is_causal=is_causal, seed=3, device=DEVICE)
    function = _function(adapters)
    each_autotune_config.run(lambda: check_forward(function, case, "triton"))


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[bad.name for bad in BAD_INPUTS])
def test_flash_forward_triton_rejects_bad_input(adapters, bad):
    """Malformed inputs raise ValueError or TypeError (RuntimeError accepted) instead of returning."""
    assert_rejects(_function(adapters), bad, triton=True)
