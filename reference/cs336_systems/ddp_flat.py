"""§3.3 ddp_flat: naive DDP with one all-reduce of all gradients flattened into one buffer.

Reference solution. Each collective has a fixed cost (latency, a launch, a synchronisation of
all ranks) on top of its bytes; a model with hundreds of parameter tensors pays it hundreds
of times per step with one all-reduce per gradient. Flattening every gradient into one buffer
pays it once, at the price of two copies of the gradients.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def all_reduce_flat_gradients(module: torch.nn.Module) -> None:
    """Average every ``.grad`` of ``module`` over the ranks with a single all-reduce of one flat buffer."""
    params = [p for p in module.parameters() if p.grad is not None]
    if not params:
        return
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)  # (total numel,), one copy of every gradient
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(dist.get_world_size())
    for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads)):
        grad.copy_(averaged)
