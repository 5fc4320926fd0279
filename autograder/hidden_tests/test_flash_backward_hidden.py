"""Hidden tests for §2.5 flash_backward, both Functions (staff only).

Beyond the visible tests: more shapes (sizes 1, 17, 100, 257, 1000; causal with n_queries <
n_keys and >), secret seeds, random and strided dO, ``o.sum().backward()`` (a dO with all-zero
strides), a backward that must use the forward's is_causal, repeated backward passes, scores
large enough to overflow exp(), torch.compile, and on a GPU bfloat16 forward and backward at
the leaderboard shape (16, 16384, 64) against a float32 truth computed in chunks.
"""

from __future__ import annotations

import pytest
import torch

from autograder.hidden_tests.flash_hidden_checks import (
    DEVICE,
    case_id,
    check_compiled,
    check_large_logits,
    check_sum_backward,
    hidden_case,
    hidden_seed,
)
from harness.flash_cases import check_backward

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
IMPLEMENTATIONS = ("pytorch", "triton")


def _function(adapters, implementation: str):
    if implementation == "pytorch":
        return adapters.get_flashattention_autograd_function_pytorch()
    return adapters.get_flashattention_autograd_function_triton()


PYTORCH_CASES = [
    hidden_case("bp-a", batch=2, n_queries=1, n_keys=1, d=16, dtype=F32, is_causal=True),
    hidden_case("bp-b", batch=3, n_queries=17, n_keys=257, d=32, dtype=F16, is_causal=True, layout="sliced"),
    hidden_case("bp-c", batch=2, n_queries=257, n_keys=17, d=64, dtype=BF16, is_causal=True, layout="mixed"),
    hidden_case("bp-d", batch=1, n_queries=1000, n_keys=100, d=128, dtype=F32, is_causal=True, layout="transposed"),
    hidden_case("bp-e", batch=1, n_queries=100, n_keys=1000, d=16, dtype=F16, is_causal=False),
    hidden_case("bp-f", batch=2, n_queries=257, n_keys=257, d=64, dtype=BF16, is_causal=False, layout="sliced"),
]

TRITON_CASES = [
    hidden_case("bt-a", batch=2, n_queries=1, n_keys=1, d=16, dtype=F32, is_causal=True),
    hidden_case("bt-b", batch=2, n_queries=17, n_keys=100, d=32, dtype=F16, is_causal=True, layout="sliced"),
    hidden_case("bt-c", batch=1, n_queries=100, n_keys=17, d=64, dtype=F32, is_causal=True, layout="mixed"),
    hidden_case("bt-d", batch=1, n_queries=257, n_keys=17, d=16, dtype=F16, is_causal=True, layout="transposed"),
    hidden_case("bt-e", batch=1, n_queries=17, n_keys=257, d=16, dtype=F32, is_causal=False),
    hidden_case("bt-f", batch=1, n_queries=100, n_keys=100, d=128, dtype=F16, is_causal=False, layout="mixed"),
]


@pytest.mark.parametrize("case", PYTORCH_CASES, ids=case_id)
def test_flash_backward_hidden_pytorch_shapes(adapters, case):
    check_backward(_function(adapters, "pytorch"), case, "pytorch")


@pytest.mark.parametrize("case", TRITON_CASES, ids=case_id)
def test_flash_backward_hidden_triton_shapes(adapters, case):
    check_backward(_function(adapters, "triton"), case, "triton")


def test_flash_backward_hidden_triton_every_autotune_config(adapters, each_autotune_config):
    """Each autotune config in turn, forward and backward, on ragged tiles."""
    shape = dict(batch=2, n_queries=257, n_keys=100, d=64) if DEVICE == "cuda" else dict(batch=1, n_queries=70, n_keys=45, d=32)
    case = hidden_case("bt-every", **shape, dtype=F32, is_causal=True, layout="mixed")
    function = _function(adapters, "triton")
    each_autotune_config.run(lambda: check_backward(function, case, "triton"), backward_only=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_uses_saved_causal(adapters, implementation):
    """Forward with is_causal=True; the backward gets only dO, so it must read the flag from ctx."""
    case = hidden_case(f"b-causal-{implementation}", batch=2, n_queries=40, n_keys=72, d=32, dtype=F32,
                       is_causal=True)
    check_backward(_function(adapters, implementation), case, implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_sum_loss(adapters, implementation):
    """``O.sum().backward()``: dO is an expanded tensor of ones with strides (0, 0, 0)."""
    case = hidden_case(f"b-sum-{implementation}", batch=2, n_queries=50, n_keys=33, d=16, dtype=F16,
                       is_causal=True, layout="mixed")
    check_sum_backward(_function(adapters, implementation), case, implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_repeat(adapters, implementation):
    """Two forward+backward passes on the same inputs both give the right gradients."""
    case = hidden_case(f"b-repeat-{implementation}", batch=2, n_queries=45, n_keys=70, d=32, dtype=F32,
                       is_causal=False, layout="sliced")
    function = _function(adapters, implementation)
    check_backward(function, case, implementation)
    check_backward(function, case, implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_large_logits(adapters, implementation):
    check_large_logits(_function(adapters, implementation), implementation, batch=1, n=48, d=64, is_causal=True,
                       seed=hidden_seed(f"b-large-{implementation}"), device=DEVICE, backward=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_beyond_float16(adapters, implementation):
    """Float32 inputs with |V| ~ 1e5: dP = dO V^T and dS reach 1e5 and more, past float16's range."""
    case = hidden_case(f"b-vlarge-{implementation}", batch=1, n_queries=40, n_keys=90, d=32, dtype=F32,
                       is_causal=True, layout="sliced", v_scale=1e5)
    check_backward(_function(adapters, implementation), case, implementation)


def test_flash_backward_hidden_pytorch_compiled(adapters):
    """torch.compile(Fn.apply) forward and backward. Kept, not dropped: a Function that breaks
    under compile (graph breaks that lose ctx state, in-place writes to saved tensors) is a real
    bug. But inductor on a GPU miscompiles some correct PyTorch Functions (tile loops writing
    into preallocated O and L), and CS336 never asks for this one to be compiled, so where the
    compiled result is wrong and the eager one right, check_compiled passes with a warning that
    names the miscompile and the torch.compiler.disable workaround instead of deducting."""
    case = hidden_case("b-compile-pytorch", batch=2, n_queries=40, n_keys=24, d=16, dtype=F32, is_causal=True)
    check_compiled(_function(adapters, "pytorch"), case, "pytorch", backward=True)


@pytest.mark.gpu
def test_flash_backward_hidden_triton_compiled_gpu(adapters):
    """GPU only, like the forward's: the CPU interpreter's launches cannot be traced by torch.compile."""
    case = hidden_case("b-compile-triton", batch=2, n_queries=1000, n_keys=257, d=64, dtype=BF16, is_causal=True,
                       device="cuda")
    check_compiled(_function(adapters, "triton"), case, "triton", backward=True)


GPU_CASES = [
    hidden_case("b-gpu-a", batch=4, n_queries=1000, n_keys=1000, d=128, dtype=BF16, is_causal=True, layout="mixed",
                device="cuda"),
    hidden_case("b-gpu-b", batch=3, n_queries=257, n_keys=4099, d=64, dtype=BF16, is_causal=True, device="cuda"),
    hidden_case("b-gpu-c", batch=3, n_queries=4099, n_keys=257, d=32, dtype=F16, is_causal=True, layout="sliced",
                device="cuda"),
    hidden_case("b-gpu-d", batch=2, n_queries=2048, n_keys=2048, d=64, dtype=F32, is_causal=False, device="cuda"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=case_id)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_flash_backward_hidden_shapes_gpu(adapters, implementation, case):
    check_backward(_function(adapters, implementation), case, implementation)


@pytest.mark.gpu
def test_flash_backward_hidden_leaderboard_shape_gpu(adapters):
    """The leaderboard shape: (16, 16384, 64), causal, bfloat16, forward and backward, against float32 chunks."""
    case = hidden_case("b-16k", batch=16, n_queries=16384, n_keys=16384, d=64, dtype=BF16, is_causal=True,
                       device="cuda")
    check_backward(_function(adapters, "triton"), case, "triton")
