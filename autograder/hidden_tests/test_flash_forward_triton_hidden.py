"""Hidden tests for §2.4 flash_forward_triton (staff only).

Beyond the visible tests: more shapes (sizes 1, 17, 100, 257, 1000; causal with n_queries <
n_keys and >), secret seeds, what the forward saves, repeat calls, scores large enough to
overflow exp(), and on a GPU torch.compile and bfloat16 up to the leaderboard shape
(16, 16384, 64) against a float32 truth computed in chunks. On a CPU the kernel runs under Triton's
interpreter, so shapes there stay small (one long side at most) and dtypes are float32/float16.
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
    hidden_case("ft-a", batch=2, n_queries=1, n_keys=1, d=16, dtype=F32, is_causal=True),
    hidden_case("ft-b", batch=2, n_queries=17, n_keys=100, d=32, dtype=F16, is_causal=True, layout="sliced"),
    hidden_case("ft-c", batch=2, n_queries=100, n_keys=17, d=64, dtype=F32, is_causal=True, layout="mixed"),
    hidden_case("ft-d", batch=1, n_queries=17, n_keys=1000, d=16, dtype=F16, is_causal=False, layout="transposed"),
    hidden_case("ft-e", batch=1, n_queries=1000, n_keys=17, d=16, dtype=F32, is_causal=True),
    hidden_case("ft-f", batch=1, n_queries=257, n_keys=100, d=128, dtype=F16, is_causal=True, layout="mixed"),
    hidden_case("ft-g", batch=1, n_queries=100, n_keys=257, d=32, dtype=F32, is_causal=True, layout="sliced"),
    hidden_case("ft-h", batch=3, n_queries=1, n_keys=257, d=64, dtype=F16, is_causal=True),
]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=case_id)
def test_flash_forward_triton_hidden_shapes(adapters, case):
    check_forward(adapters.get_flashattention_autograd_function_triton(), case, "triton")


def test_flash_forward_triton_hidden_saved_tensors(adapters):
    case = hidden_case("ft-saved", batch=2, n_queries=96, n_keys=80, d=16, dtype=F32, is_causal=True)
    check_saved_tensors(adapters.get_flashattention_autograd_function_triton(), case, "triton")


def test_flash_forward_triton_hidden_repeat_call(adapters):
    case = hidden_case("ft-repeat", batch=2, n_queries=70, n_keys=45, d=32, dtype=F16, is_causal=True)
    check_repeat_call(adapters.get_flashattention_autograd_function_triton(), case, "triton")


def test_flash_forward_triton_hidden_every_autotune_config(adapters, each_autotune_config):
    """Each autotune config in turn: the output and what the forward saves, on ragged tiles."""
    shape = dict(batch=2, n_queries=100, n_keys=257) if DEVICE == "cuda" else dict(batch=1, n_queries=45, n_keys=70)
    case = hidden_case("ft-every", **shape, d=32, dtype=F32, is_causal=True, layout="sliced")
    function = adapters.get_flashattention_autograd_function_triton()

    def check():
        check_forward(function, case, "triton")
        check_saved_tensors(function, case, "triton")

    each_autotune_config.run(check)


@pytest.mark.gpu
def test_flash_forward_triton_hidden_compiled_gpu(adapters):
    """GPU only: under the CPU interpreter a kernel launch is NumPy code that torch.compile
    cannot trace, which says nothing about the kernel, so the check would only punish it."""
    case = hidden_case("ft-compile", batch=2, n_queries=1000, n_keys=257, d=64, dtype=BF16, is_causal=True,
                       device="cuda")
    check_compiled(adapters.get_flashattention_autograd_function_triton(), case, "triton", backward=False)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_forward_triton_hidden_large_logits(adapters, is_causal):
    check_large_logits(adapters.get_flashattention_autograd_function_triton(), "triton", batch=1, n=48, d=64,
                       is_causal=is_causal, seed=hidden_seed(f"ft-large-{is_causal}"), device=DEVICE, backward=False)


def test_flash_forward_triton_hidden_beyond_float16(adapters):
    """Float32 inputs with |V| ~ 1e5: an accumulator kept in float16 overflows (65504)."""
    case = hidden_case("ft-vlarge", batch=1, n_queries=40, n_keys=200, d=32, dtype=F32, is_causal=True,
                       layout="transposed", v_scale=1e5)
    check_forward(adapters.get_flashattention_autograd_function_triton(), case, "triton")


def test_flash_forward_triton_hidden_long_flat_softmax_float16(adapters):
    """2048 nearly equal float16 scores: a running sum kept in float16 loses part of each tile,
    and L, held to 5e-4, shows it."""
    case = hidden_case("ft-flat16", batch=1, n_queries=32, n_keys=2048, d=32, dtype=F16, q_scale=0.1)
    check_forward(adapters.get_flashattention_autograd_function_triton(), case, "triton")


GPU_CASES = [
    hidden_case("ft-gpu-a", batch=4, n_queries=1000, n_keys=1000, d=128, dtype=BF16, is_causal=True, layout="mixed",
                device="cuda"),
    hidden_case("ft-gpu-b", batch=3, n_queries=257, n_keys=4099, d=64, dtype=BF16, is_causal=True, device="cuda"),
    hidden_case("ft-gpu-c", batch=3, n_queries=4099, n_keys=257, d=32, dtype=F16, is_causal=True, layout="sliced",
                device="cuda"),
    hidden_case("ft-gpu-d", batch=2, n_queries=2048, n_keys=2048, d=64, dtype=F32, is_causal=False, device="cuda"),
    hidden_case("ft-gpu-flat", batch=2, n_queries=128, n_keys=16384, d=64, dtype=BF16, q_scale=0.1, device="cuda"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=case_id)
def test_flash_forward_triton_hidden_shapes_gpu(adapters, case):
    check_forward(adapters.get_flashattention_autograd_function_triton(), case, "triton")


@pytest.mark.gpu
def test_flash_forward_triton_hidden_leaderboard_shape_gpu(adapters):
    """The leaderboard shape: (16, 16384, 64), causal, bfloat16, against float32 chunks."""
    case = hidden_case("ft-16k", batch=16, n_queries=16384, n_keys=16384, d=64, dtype=BF16, is_causal=True,
                       device="cuda")
    check_forward(adapters.get_flashattention_autograd_function_triton(), case, "triton")
