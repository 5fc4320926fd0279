"""Provided: the input checks shared by both FlashAttention-2 implementations (§2.3–§2.5).

You do not need to change this file. Call ``check_flash_attention_inputs`` first thing in your
``forward`` (PyTorch and Triton alike): it turns every malformed call into a ``TypeError`` or
``ValueError`` that names the problem and the fix, instead of a silent wrong answer or a crash
deep inside a kernel.

The contract it enforces (Stanford CS336's, widened):

* Q is (batch, n_queries, d); K and V are (batch, n_keys, d); batch, n_queries, n_keys >= 1.
* Q, K and V share one dtype (float32, float16 or bfloat16) and one device.
* d is 16, 32, 64 or 128 (``SUPPORTED_HEAD_DIMS``): powers of two, as ``tl.arange`` needs.
* ``is_causal`` is a Python bool.
* The Triton path (``needs_triton=True``) also needs CUDA tensors, or CPU tensors with
  ``TRITON_INTERPRET=1`` set before triton is imported.
"""

from __future__ import annotations

import os

import torch

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Triton decides at import time whether kernels run in its interpreter, so read the flag once.
TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_flash_attention_inputs(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool, *, needs_triton: bool = False
) -> None:
    """Raise TypeError or ValueError, naming the problem and the fix, unless the inputs are valid.

    Args:
        Q: (batch, n_queries, d) queries.
        K: (batch, n_keys, d) keys.
        V: (batch, n_keys, d) values.
        is_causal: whether query i may only see keys j <= i.
        needs_triton: also require a device Triton can run on (CUDA, or CPU under TRITON_INTERPRET=1).

    Raises:
        TypeError: an argument is not a tensor, the dtypes differ or are not float32/float16/bfloat16,
            or ``is_causal`` is not a bool.
        ValueError: a wrong rank, mismatched batch/d/n_keys, an empty dimension, an unsupported
            head dim, tensors on different devices, or a device Triton cannot run on.
    """
    for name, tensor in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"expected {name} to be a torch.Tensor; got {type(tensor).__name__}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"expected is_causal to be a bool (True or False); got {type(is_causal).__name__}")

    for name, tensor, rows in (("Q", Q, "n_queries"), ("K", K, "n_keys"), ("V", V, "n_keys")):
        if tensor.dim() != 3:
            raise ValueError(
                f"expected {name} of shape (batch, {rows}, d); got {tuple(tensor.shape)}. "
                "Fold heads into the batch dimension: (batch, heads, seq, d) -> (batch * heads, seq, d)."
            )
    if not Q.shape[0] == K.shape[0] == V.shape[0]:
        raise ValueError(
            f"Q, K and V must have the same batch size; got {Q.shape[0]}, {K.shape[0]}, {V.shape[0]}"
        )
    if K.shape[1] != V.shape[1]:
        raise ValueError(
            f"K and V must have the same number of keys (dim 1); got K {tuple(K.shape)} and V {tuple(V.shape)}"
        )
    if not Q.shape[2] == K.shape[2] == V.shape[2]:
        raise ValueError(
            f"Q, K and V must have the same head dim d (last dim); got {Q.shape[2]}, {K.shape[2]}, {V.shape[2]}"
        )
    if Q.shape[0] < 1 or Q.shape[1] < 1 or K.shape[1] < 1:
        raise ValueError(
            f"batch, n_queries and n_keys must be at least 1; got Q {tuple(Q.shape)} and K {tuple(K.shape)}"
        )
    if Q.shape[2] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"head dim d={Q.shape[2]} is not supported; use one of {SUPPORTED_HEAD_DIMS} "
            "(pad d up to the next supported size with zeros if you need another)"
        )

    if not Q.dtype == K.dtype == V.dtype:
        raise TypeError(
            f"Q, K and V must have the same dtype; got {Q.dtype}, {K.dtype}, {V.dtype}. Cast them with .to(dtype)."
        )
    if Q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {Q.dtype} is not supported; use one of {SUPPORTED_DTYPES}")

    if not Q.device == K.device == V.device:
        raise ValueError(
            f"Q, K and V must be on the same device; got {Q.device}, {K.device}, {V.device}. Move them with .to(device)."
        )
    if needs_triton and Q.device.type != "cuda" and not (Q.device.type == "cpu" and TRITON_INTERPRET):
        raise ValueError(
            f"the Triton kernels need CUDA tensors; got tensors on {Q.device}. Move them to the GPU with "
            ".cuda(), or run on the CPU under Triton's interpreter by setting TRITON_INTERPRET=1 before "
            "triton is imported."
        )
