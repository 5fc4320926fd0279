"""§3.2 naive_ddp: data-parallel training by all-reducing each gradient after the backward.

Reference solution. Every rank holds a full copy of the model and trains on its own slice of
the batch. Two collectives make the copies behave like one model trained on the whole batch:
a broadcast of rank 0's parameters and buffers before training, and after every backward an
all-reduce of each gradient, divided by the world size (each rank's loss is a mean over its
own slice, so the average of the ranks' gradients is the gradient of the mean over the batch).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def broadcast_parameters(module: torch.nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers into every rank's ``module``, in place."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=src)


def all_reduce_gradients(module: torch.nn.Module) -> None:
    """Replace each parameter's ``.grad`` by its mean over the ranks: one all-reduce per gradient."""
    world_size = dist.get_world_size()
    for param in module.parameters():
        if param.grad is None:
            continue
        # Every rank waits here until every rank's gradient has arrived: no overlap with the backward.
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad.div_(world_size)
