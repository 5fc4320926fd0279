"""§1.2 nsys_profile: NVTX ranges that make an Nsight Systems timeline readable.

Reference solution. NVTX calls go through ``torch.cuda.nvtx`` at call time, so that the tests
can record them on a machine without CUDA.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cs336_systems import model as lm

PHASES = ("warm-up", "forward", "backward", "optimizer")
"""The NVTX range names of :func:`profiled_training`, in the order they first appear."""

ATTENTION_RANGES = ("computing attention scores", "computing softmax", "final matmul")
"""The NVTX range names of :func:`annotated_scaled_dot_product_attention`, in order."""


def annotated_scaled_dot_product_attention(
    Q: Float[Tensor, "... queries d_k"],
    K: Float[Tensor, "... keys d_k"],
    V: Float[Tensor, "... keys d_v"],
    mask: Bool[Tensor, "... queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    """``cs336_systems.model.scaled_dot_product_attention``, with one NVTX range per stage."""
    nvtx = torch.cuda.nvtx
    with nvtx.range("computing attention scores"):
        scores = einsum(Q, K, "... queries d_k, ... keys d_k -> ... queries keys") / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))  # (..., q, k)
    with nvtx.range("computing softmax"):
        weights = lm.softmax(scores, dim=-1)  # (..., q, k)
    with nvtx.range("final matmul"):
        return einsum(weights, V, "... queries keys, ... keys d_v -> ... queries d_v")  # (..., q, d_v)


def profiled_training(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: Int[Tensor, "batch seq"],
    targets: Int[Tensor, "batch seq"],
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
) -> None:
    """Train for warm-up then measured steps, each measured step split into NVTX phase ranges."""
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0; got {warmup_steps!r}")
    if not isinstance(measure_steps, int) or measure_steps < 1:
        raise ValueError(f"measure_steps must be an integer >= 1; got {measure_steps!r}")
    nvtx = torch.cuda.nvtx

    def loss_of_batch() -> Tensor:
        logits = model(inputs)  # (batch, seq, vocab)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    with nvtx.range("warm-up"):
        for _ in range(warmup_steps):
            loss_of_batch().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        synchronize()
    for _ in range(measure_steps):
        with nvtx.range("forward"):
            loss = loss_of_batch()
        with nvtx.range("backward"):
            loss.backward()
        with nvtx.range("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        synchronize()
