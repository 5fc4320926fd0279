"""§1.2 nsys_profile: NVTX ranges that make an Nsight Systems timeline readable.

Nsight Systems (``nsys profile``) records every CUDA kernel on a timeline. NVTX ranges are
labels you push and pop from Python; nsys draws them above the kernels they launched, so you can
see which part of your code a kernel belongs to and filter its statistics by range. You write:

1. ``annotated_scaled_dot_product_attention``: the model's attention with one range per stage,
   to swap into the model (see ``cs336_systems.model``: ``attention_fn=`` or ``use_attention``);
2. ``profiled_training``: a training loop whose measured steps are split into one range per phase.

Call NVTX through the module at call time, as ``torch.cuda.nvtx.range("name")`` (a context
manager) or ``torch.cuda.nvtx.range_push("name")`` / ``torch.cuda.nvtx.range_pop()``. Do not
``from torch.cuda.nvtx import ...``: the tests replace those functions with recorders, because
real NVTX calls fail on a machine without CUDA. See handout/README.md, §1.2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.2 nsys_profile"

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
    """``cs336_systems.model.scaled_dot_product_attention``, with one NVTX range per stage.

    Compute exactly what the model's attention computes (same arguments, same result up to
    float rounding, gradients included): softmax(Q K^T / sqrt(d_k)) V, where scores whose
    ``mask`` entry is False are set to -inf before the softmax. ``mask`` is True where a query
    may attend to a key and broadcasts against the (..., queries, keys) scores.

    Push three NVTX ranges, one after the other (not nested), in this order, with these names:

    1. ``"computing attention scores"``: the Q K^T matmul, the scaling and the masking;
    2. ``"computing softmax"``: the softmax over keys (``cs336_systems.model.softmax`` or your own);
    3. ``"final matmul"``: the product of the attention weights with V.

    Every matmul, exp and softmax of the computation happens inside its range; each range is
    popped before the next is pushed (``with torch.cuda.nvtx.range(...)`` does that for you).

    Args:
        Q: (..., queries, d_k), floating point.
        K: (..., keys, d_k), Q's dtype.
        V: (..., keys, d_v), Q's dtype.
        mask: optional bool, broadcastable to (..., queries, keys).

    Returns:
        (..., queries, d_v), V's dtype.
    """
    raise not_implemented(__file__, "annotated_scaled_dot_product_attention", _SECTION)


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
    """Train ``model`` for ``warmup_steps`` + ``measure_steps`` steps, annotating phases with NVTX.

    One training step on the fixed batch is: ``logits = model(inputs)``; ``loss =
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())``;
    ``loss.backward()``; ``optimizer.step()``; ``optimizer.zero_grad()``. Gradients are zero
    (or None) on entry.

    NVTX ranges, in this order (names from ``PHASES``; other ranges, such as the attention's,
    may appear inside them):

    * ``"warm-up"``: one range around all ``warmup_steps`` steps (pushed even when there are
      none). Inside it the steps are not split into phases, and ``synchronize()`` is called
      once at its end, inside the range.
    * Then for each of the ``measure_steps`` steps, three consecutive ranges: ``"forward"``
      (the model's forward pass and the loss), ``"backward"`` (``loss.backward()``) and
      ``"optimizer"`` (``optimizer.step()`` and ``optimizer.zero_grad()``), followed by one
      ``synchronize()`` call after ``"optimizer"`` is popped.

    So ``synchronize`` is called exactly ``1 + measure_steps`` times. On a GPU pass
    ``torch.cuda.synchronize``; it makes each measured step end with the GPU idle, so that the
    ranges of consecutive steps do not overlap on the timeline.

    Args:
        model: maps ``inputs`` to logits of shape (batch, seq, vocab).
        optimizer: over ``model``'s parameters.
        inputs: token ids, (batch, seq), int64.
        targets: next-token ids, (batch, seq), int64.
        warmup_steps: int >= 0.
        measure_steps: int >= 1.
        synchronize: waits for the device.

    Returns:
        None. The model's parameters have been updated ``warmup_steps + measure_steps`` times.

    Raises:
        ValueError: ``warmup_steps`` < 0 or ``measure_steps`` < 1, before any step runs.
    """
    raise not_implemented(__file__, "profiled_training", _SECTION)
