"""Library attention and the Triton share, from made-up profiles and from the real CPU profiler."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from leaderboard.kernels import (
    ProfiledEvent,
    check_library_attention,
    check_triton_share,
    is_triton_kernel,
    profile_call,
    triton_function_names,
)

TRITON_NAMES = {"flash_fwd_kernel", "flash_bwd_dq_kernel"}
# Kernel names as the CUDA profiler shows them (demangled), from PyTorch's attention backends.
SDPA_FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t>, true>(pytorch_flash::Flash_fwd_params)"
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"
EFFICIENT = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)"
CUBLAS = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def gpu(name, us):
    return ProfiledEvent(name, True, us)


def test_triton_kernel_names():
    assert is_triton_kernel("flash_fwd_kernel", TRITON_NAMES)
    assert is_triton_kernel("flash_fwd_kernel_0", TRITON_NAMES)  # torch.compile's renamed copy
    assert is_triton_kernel("triton_poi_fused_add_0", TRITON_NAMES)  # torch.compile's own
    assert not is_triton_kernel(SDPA_FLASH, TRITON_NAMES)
    assert not is_triton_kernel("flash_fwd_kernel_extra", TRITON_NAMES)


def test_a_students_triton_kernel_named_flash_is_not_library_attention():
    events = [gpu("flash_fwd_kernel", 900.0), gpu("flash_bwd_dq_kernel", 1500.0), gpu(CUBLAS, 10.0)]
    assert check_library_attention(events, TRITON_NAMES) is None


def test_library_attention_kernels_are_refused():
    for kernel in (SDPA_FLASH, CUDNN, EFFICIENT):
        refusal = check_library_attention([gpu("flash_fwd_kernel", 10.0), gpu(kernel, 900.0)], TRITON_NAMES)
        assert refusal.code == "library_attention", kernel


def test_pytorch_attention_operators_are_refused():
    for op in ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward"):
        refusal = check_library_attention([ProfiledEvent(op, False, 5.0)], TRITON_NAMES)
        assert refusal.code == "library_attention" and op in refusal.message
    assert check_library_attention([ProfiledEvent("aten::bmm", False, 5.0)], TRITON_NAMES) is None


def test_triton_share_of_the_forward():
    honest = [gpu("flash_fwd_kernel", 900.0), gpu("triton_poi_fused_0", 20.0), gpu("Memset (Device)", 5.0)]
    assert check_triton_share(honest, TRITON_NAMES, 0.5) is None
    pytorch_forward = [gpu(CUBLAS, 700.0), gpu("void at::native::softmax_warp_forward<...>", 300.0), gpu("triton_poi_fused_0", 20.0)]
    refusal = check_triton_share(pytorch_forward, TRITON_NAMES, 0.5)
    assert refusal.code == "not_triton" and "sm90_xmma_gemm" in refusal.message
    assert check_triton_share([], TRITON_NAMES, 0.5) is None  # nothing recorded: nothing to judge


@triton.jit
def leaderboard_test_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


def test_triton_function_names_finds_jit_functions():
    assert "leaderboard_test_kernel" in triton_function_names()


def test_the_cpu_profiler_sees_sdpa_but_not_plain_attention():
    q = torch.randn(1, 2, 16, 8)
    sdpa = profile_call(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), lambda: None, cuda=False)
    assert check_library_attention(sdpa, set()).code == "library_attention"
    plain = profile_call(lambda: torch.softmax(q @ q.transpose(-1, -2), -1) @ q, lambda: None, cuda=False)
    assert check_library_attention(plain, set()) is None
