"""§3.3 ddp_flat: naive DDP with one all-reduce of all the gradients, flattened into one buffer.

A collective has a fixed cost (latency, a synchronisation of every rank) on top of the time
its bytes take. With one all-reduce per gradient, a model with hundreds of parameter tensors
pays it hundreds of times a step. Copy every gradient into one flat buffer, all-reduce that
once, and copy the means back (``torch._utils._flatten_dense_tensors`` and
``_unflatten_dense_tensors`` do the copies). Then compare both versions in §3.1's benchmark.

Runs on every rank after ``torch.distributed.init_process_group``; call collectives through
``torch.distributed``. See handout/README.md, §3.3.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.3 ddp_flat"


def all_reduce_flat_gradients(module: torch.nn.Module) -> None:
    """Average every gradient of ``module`` over the ranks with exactly one all-reduce.

    Gather the ``.grad`` of every parameter that has one (each tensor once: a tied weight
    counts once) into a single flat tensor, ``dist.all_reduce`` it once, divide by the world
    size, and copy each slice back into its parameter's ``.grad`` in place. The flat tensor is in
    the gradients' dtype (``torch.empty(n)`` would be float32 whatever the model's; the tests train
    float64 and bfloat16 models too) and on their device (``torch.empty(n, dtype=...)`` would be on
    the CPU, which NCCL refuses), and every ``.grad`` keeps its dtype. Parameters without
    a gradient keep ``.grad`` None. A module with no gradients at all makes no call.
    """
    raise not_implemented(__file__, "all_reduce_flat_gradients", _SECTION)
