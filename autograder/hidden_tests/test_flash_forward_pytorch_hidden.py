"""Hidden tests for §2.3 flash_forward_pytorch (staff only).

Beyond the visible tests: more shapes (sizes 1, 17, 100, 257, 1000; causal with n_queries <
n_keys and >), secret seeds, what the forward saves, repeat calls, torch.compile, scores large
enough to overflow exp(), and a long flat softmax that exposes a running sum kept in 16 bits.
"""

from __future__ import annotations

import pytest
import torch

from autograder.hidden_tests.flash_hidden_checks import (
    DEVICE,
    case_id,
    check_compiled,
    check_large_logits,
    check_repeat_call,
    check_saved_tensors,
    hidden_case,
    hidden_seed,
)
from harness.flash_cases import check_forward

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

SHAPE_CASES = [
    hidden_case("fp-a", batch=2, n_queries=1, n_keys=1, d=16, dtype=F32, is_causal=True),
    hidden_case("fp-b", batch=3, n_queries=17, n_keys=100, d=32, dtype=F16, is_causal=True, layout="sliced"),
    hidden_case("fp-c", batch=2, n_queries=100, n_keys=17, d=64, dtype=BF16, is_causal=True, layout="mixed"),
    hidden_case("fp-d", batch=1, n_queries=257, n_keys=1000, d=128, dtype=F32, is_causal=True, layout="transposed"),
    hidden_case("fp-e", batch=2, n_queries=1000, n_keys=257, d=16, dtype=F16, is_causal=True),
    hidden_case("fp-f", batch=1, n_queries=1000, n_keys=1, d=32, dtype=BF16, is_causal=True, layout="sliced"),
    hidden_case("fp-g", batch=1, n_queries=1, n_keys=1000, d=64, dtype=F32, is_causal=True),
    hidden_case("fp-h", batch=2, n_queries=257, n_keys=257, d=64, dtype=F16, is_causal=False, layout="mixed"),
    hidden_case("fp-i", batch=4, n_queries=100, n_keys=257, d=128, dtype=BF16, is_causal=False),
    hidden_case("fp-j", batch=3, n_queries=17, n_keys=1000, d=16, dtype=F32, is_causal=False, layout="transposed"),
]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=case_id)
def test_flash_forward_pytorch_hidden_shapes(adapters, case):
    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


def test_flash_forward_pytorch_hidden_saved_tensors(adapters):
    case = hidden_case("fp-saved", batch=2, n_queries=96, n_keys=80, d=16, dtype=F32, is_causal=True)
    check_saved_tensors(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


def test_flash_forward_pytorch_hidden_repeat_call(adapters):
    case = hidden_case("fp-repeat", batch=2, n_queries=70, n_keys=45, d=32, dtype=F16, is_causal=True)
    check_repeat_call(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


def test_flash_forward_pytorch_hidden_compiled(adapters):
    case = hidden_case("fp-compile", batch=2, n_queries=40, n_keys=24, d=16, dtype=F32, is_causal=True)
    check_compiled(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch", backward=False)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_pytorch_hidden_large_logits(adapters, is_causal):
    check_large_logits(adapters.get_flashattention_autograd_function_pytorch(), "pytorch", batch=2, n=80, d=64,
                       is_causal=is_causal, seed=hidden_seed(f"fp-large-{is_causal}"), device=DEVICE, backward=False)


def test_flash_forward_pytorch_hidden_long_flat_softmax(adapters):
    """4096 keys with nearly equal scores (Q scaled by 0.1): the running sum reaches ~4096, where
    bfloat16 spacing is 32, so a running sum kept in bfloat16 loses whole tiles. L must stay exact."""
    case = hidden_case("fp-flat", batch=2, n_queries=64, n_keys=4096, d=64, dtype=BF16, q_scale=0.1)
    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


BEYOND_FLOAT16_CASES = [
    hidden_case("fp-vlarge-a", batch=2, n_queries=70, n_keys=300, d=32, dtype=F32, is_causal=True, v_scale=1e5),
    hidden_case("fp-vlarge-b", batch=1, n_queries=33, n_keys=1000, d=64, dtype=F32, layout="mixed", v_scale=1e5),
]


@pytest.mark.parametrize("case", BEYOND_FLOAT16_CASES, ids=case_id)
def test_flash_forward_pytorch_hidden_beyond_float16(adapters, case):
    """Float32 inputs with |V| ~ 1e5: an accumulator or O kept in float16 overflows (65504)."""
    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


def test_flash_forward_pytorch_hidden_long_flat_softmax_float16(adapters):
    """4096 nearly equal float16 scores: a running sum kept in float16 (spacing 4 near 4096)
    rounds away part of each tile, and L, held to 5e-4, shows it."""
    case = hidden_case("fp-flat16", batch=1, n_queries=64, n_keys=4096, d=64, dtype=F16, q_scale=0.1)
    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_flash_forward_pytorch_hidden_large_gpu(adapters, dtype):
    case = hidden_case("fp-gpu", batch=4, n_queries=2049, n_keys=4000, d=64, dtype=dtype, is_causal=True,
                       layout="mixed", device="cuda")
    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case, "pytorch")
