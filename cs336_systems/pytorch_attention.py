"""§2.1 pytorch_attention: how attention's time and memory grow with sequence length.

Plain attention materialises the (seq, seq) matrix of scores and keeps the softmax of it for
the backward pass, so its memory grows with the square of the sequence length: at some length
it no longer fits on the GPU. You measure where, and how the time grows on the way, by sweeping
head dimensions × sequence lengths at batch size 8 with a single head (no head dimension).
FlashAttention-2 (§2.3–§2.5) removes that matrix. See handout/README.md, §2.1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§2.1 pytorch_attention"


def attention_sweep(
    *,
    batch_size: int = 8,
    head_dims: Sequence[int] = (16, 32, 64, 128),
    seq_lens: Sequence[int] = (256, 1024, 4096, 8192, 16384),
    device: str | torch.device = "cuda",
    warmup_steps: int = 5,
    measure_steps: int = 100,
    compiled: bool = False,
    attention_fn: Callable[..., torch.Tensor] | None = None,
) -> list[dict[str, Any]]:
    """Time attention forward and backward for every head_dim × seq_len; one row each.

    The attention timed is ``attention_fn(Q, K, V) -> O`` (no mask), by default
    ``cs336_systems.model.scaled_dot_product_attention``; with ``compiled=True`` it is
    ``torch.compile(attention)`` instead (call ``torch.compile`` at call time: tests watch it),
    compiled once for the whole sweep.

    For each ``head_dim`` in ``head_dims`` (outer loop) and each ``seq_len`` in ``seq_lens``
    (inner loop):

    1. Draw random Q, K, V of shape (batch_size, seq_len, head_dim), float32, on ``device``,
       with ``requires_grad=True``.
    2. Forward: time ``attention(Q, K, V)`` with ``benchmarking_script.time_steps``
       (``warmup_steps`` untimed, then ``measure_steps`` timed; synchronize with
       ``torch.cuda.synchronize`` on a CUDA device, nothing elsewhere).
    3. Run one more forward to get O, and draw a random gradient dO like O. On a CUDA device,
       record ``torch.cuda.memory_allocated()`` now: the memory in use before the backward.
    4. Backward: time the backward of that one forward alone (for example
       ``torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True)``), again with
       ``time_steps`` (warm-up steps untimed). The forward is not part of this time.
    5. If anything in steps 1–4 raises ``torch.cuda.OutOfMemoryError``, catch it, mark the row
       as out of memory, release what you can (``torch.cuda.empty_cache()`` on CUDA) and go on
       with the next configuration. Other exceptions propagate.

    Returns:
        One dict per configuration, in loop order, with keys ``batch_size`` (int),
        ``head_dim`` (int), ``seq_len`` (int), ``compiled`` (bool), ``forward_ms`` (float:
        mean milliseconds per forward), ``backward_ms`` (float: mean milliseconds per
        backward), ``memory_before_backward_bytes`` (int on CUDA; None on other devices) and
        ``oom`` (bool). A measurement that could not be taken because memory ran out is None.

    Raises:
        ValueError: ``batch_size`` < 1, or bad step counts (from ``time_steps``).
    """
    raise not_implemented(__file__, "attention_sweep", _SECTION)
