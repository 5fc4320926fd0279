"""Visible tests for §2.5 flash_backward: the backward of both FlashAttention-2 Functions.

Each test runs ``Function.apply(Q, K, V, is_causal)``, then backward with a random dO, and
compares dQ, dK, dV with autograd through plain attention in float64 (harness/flash_reference.py)
under the tolerances of harness/flash_tolerances.py. The backward must rebuild the probabilities
from the saved logsumexp L, so a wrong L fails here too. A failure names the case in one line
you can rerun (see harness/flash_cases.py) and says by how much it missed.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, note

from harness import gpus
from harness.flash_cases import FlashCase, check_backward, first_case, flash_case_strategy
from harness.autotune_configs import EVERY_CONFIG_SHAPE
from harness.hypothesis_profiles import FUZZ

DEVICE = "cuda" if gpus.count() else "cpu"
# The Triton cases are marked: they are skipped where Triton is not installed (harness/triton_marker.py).
IMPLEMENTATIONS = ("pytorch", pytest.param("triton", marks=pytest.mark.triton))


def _function(adapters, implementation: str):
    if implementation == "pytorch":
        return adapters.get_flashattention_autograd_function_pytorch()
    return adapters.get_flashattention_autograd_function_triton()


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_cs336_shape(adapters, implementation, is_causal):
    """The CS336 case: batch 4, 128 queries, 128 keys, d 64, float32, random dO."""
    case = FlashCase(batch=4, n_queries=128, n_keys=128, d=64, dtype=torch.float32, is_causal=is_causal, device=DEVICE)
    check_backward(_function(adapters, implementation), case, implementation)


@given(
    case=flash_case_strategy(
        dtypes=tuple(dict.fromkeys(FUZZ.dtypes + (torch.bfloat16,))),
        max_batch=FUZZ.max_batch,
        max_tokens=FUZZ.max_tokens,
        device=FUZZ.device,
    )
)
def test_flash_backward_pytorch_any_shape(adapters, case):
    """PyTorch backward: any shape, dtype (bfloat16 too), causal or not, strided inputs and dO."""
    function = _function(adapters, "pytorch")
    note(f"rerun: {case.command('pytorch', 'backward')}")
    check_backward(function, case, "pytorch")


@pytest.mark.triton
@given(
    case=flash_case_strategy(
        dtypes=FUZZ.dtypes, max_batch=FUZZ.max_batch, max_tokens=FUZZ.max_tokens, device=FUZZ.device
    )
)
@example(case=first_case(FUZZ.device))  # most bugs fail here, before any search or shrinking
def test_flash_backward_triton_any_shape(adapters, case):
    """Triton backward: any shape, dtype, causal or not, strided inputs and dO."""
    function = _function(adapters, "triton")
    note(f"rerun: {case.command('triton', 'backward')}")
    check_backward(function, case, "triton")


@pytest.mark.triton
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_backward_triton_every_autotune_config(adapters, each_autotune_config, is_causal):
    """Each config of your @triton.autotune kernels, one after another, forward and backward on
    ragged tiles: 130 queries, 203 keys (70 and 45 under the interpreter). Your autotuner may keep
    any of them, so every one must be right (handout §2.4); the other tests run one config each."""
    case = FlashCase(**EVERY_CONFIG_SHAPE, dtype=torch.float32, is_causal=is_causal, seed=13, device=DEVICE)
    function = _function(adapters, "triton")
    each_autotune_config.run(lambda: check_backward(function, case, "triton"), backward_only=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_half_precision_gpu(adapters, implementation, dtype):
    """Half precision, causal, at a size where tiles and masks matter: (4, 1000, 1537, 64)."""
    case = FlashCase(batch=4, n_queries=1000, n_keys=1537, d=64, dtype=dtype, is_causal=True, seed=11, device="cuda")
    check_backward(_function(adapters, implementation), case, implementation)
