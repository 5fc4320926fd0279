"""§2.6 flash_benchmarking: your Triton FlashAttention-2 against plain PyTorch attention.

You compare the latency of your ``FlashAttentionTriton`` (§2.4–§2.5) with plain PyTorch
attention, forward, backward and forward+backward, over sequence lengths × head dimensions ×
dtypes, at batch size 1 with causal masking. On a GPU every number comes from
``triton.testing.do_bench``, which warms up, flushes the L2 cache between runs and times with
CUDA events. See handout/README.md, §2.6.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§2.6 flash_benchmarking"

PHASES = ("forward", "backward", "forward_backward")
"""The three timings of every implementation, as the middle part of the row keys."""


def flash_benchmark_sweep(
    *,
    seq_lens: Sequence[int],
    head_dims: Sequence[int],
    dtypes: Sequence[torch.dtype],
    device: str | torch.device,
    batch_size: int = 1,
    is_causal: bool = True,
    implementations: Mapping[str, Callable[..., torch.Tensor]] | None = None,
    bench: Callable[[Callable[[], Any]], float] | None = None,
) -> list[dict[str, Any]]:
    """Time forward, backward and forward+backward of each implementation over a grid; one row per point.

    ``implementations`` maps a name to an attention ``fn(Q, K, V, is_causal) -> O`` with
    FlashAttention's calling convention (Q, K, V and O of shape (batch, seq, head_dim), causal
    mask top-left aligned). None means ``{"triton": FlashAttentionTriton.apply, "pytorch":
    <plain attention>}``, where ``FlashAttentionTriton`` comes from
    ``cs336_systems.flash_attention_triton`` (import it inside this function, so that this module
    imports before you have written it) and plain attention is
    ``cs336_systems.model.scaled_dot_product_attention`` with the causal mask built from
    ``is_causal``.

    ``bench(fn) -> float`` times a zero-argument function and returns milliseconds. None means:
    on a CUDA device, ``triton.testing.do_bench(fn, return_mode="median")`` (call it as
    ``triton.testing.do_bench`` at call time: tests watch it); on any other device, the median
    of a few calls timed with ``benchmarking_script.time_steps``, after one untimed call.

    For each ``seq_len`` (outer loop), ``head_dim``, ``dtype`` (inner loop):

    1. Draw random Q, K, V of shape (batch_size, seq_len, head_dim) in ``dtype`` on ``device``
       with ``requires_grad=True``, and a random dO of the same shape, with ``torch.randn``,
       once, shared by all implementations.
    2. For each implementation ``name`` (in the mapping's order), call ``bench`` exactly three
       times, in this order:

       * ``{name}_forward_ms``: ``bench`` of a function that runs the forward pass only;
       * ``{name}_backward_ms``: run one forward outside ``bench``, then ``bench`` of a
         function that runs only the backward of that output with dO (for example
         ``torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True)``);
       * ``{name}_forward_backward_ms``: ``bench`` of a function that runs a forward and its
         backward with dO.

    3. If drawing the inputs or benchmarking an implementation raises
       ``torch.cuda.OutOfMemoryError``, catch it: that implementation's (or, for the inputs,
       every implementation's) name goes into the row's ``oom`` list, its missing timings stay
       None, memory is released (``torch.cuda.empty_cache()`` on CUDA) and the sweep goes on.

    Returns:
        One dict per grid point, in loop order, with keys ``seq_len`` (int), ``head_dim``
        (int), ``dtype`` (str without the ``torch.`` prefix, e.g. ``"bfloat16"``),
        ``batch_size`` (int), ``is_causal`` (bool), ``{name}_{phase}_ms`` for every
        implementation name and every phase in ``PHASES`` (float milliseconds exactly as
        ``bench`` returned it, or None) and ``oom`` (list of implementation names, empty when
        everything fit).

    Raises:
        ImportError: the default implementations are asked for and
            ``cs336_systems.flash_attention_triton`` cannot be imported.
    """
    raise not_implemented(__file__, "flash_benchmark_sweep", _SECTION)
