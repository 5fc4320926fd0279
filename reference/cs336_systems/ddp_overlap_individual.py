"""§3.4 ddp_overlap_individual: DDP that all-reduces each gradient as soon as the backward produces it.

Reference solution. The backward computes gradients from the last layer to the first. As soon
as a parameter's gradient is complete (a post-accumulate-grad hook fires), its all-reduce is
launched asynchronously, so that communication runs while the backward still computes the
gradients of earlier layers. ``finish_gradient_synchronization`` waits for the outstanding
all-reduces and averages the results; it runs after ``loss.backward()`` and before the
optimizer step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class DDPIndividualParameters(torch.nn.Module):
    """Wraps ``module`` for data-parallel training; see ``cs336_systems/ddp_overlap_individual.py``."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        self._pending: list[tuple[dist.Work, torch.Tensor]] = []
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)
        # module.parameters() yields a tied parameter once, so it gets one hook and one all-reduce.
        for param in module.parameters():
            if param.requires_grad:  # a frozen parameter has no gradient, and cannot take a hook
                param.register_post_accumulate_grad_hook(self._launch)

    def _launch(self, param: torch.Tensor) -> None:
        # Safe to start now: this parameter's gradient is complete for this backward.
        work = dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, async_op=True)
        self._pending.append((work, param.grad))

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        """Wait for every all-reduce launched in this backward, then divide each gradient by the world size."""
        for work, grad in self._pending:
            work.wait()
            grad.div_(self.world_size)
        self._pending.clear()
