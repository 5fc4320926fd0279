"""§3.4 ddp_overlap_individual: DDP that all-reduces each gradient while the backward goes on.

Naive DDP waits for the whole backward, then communicates. But the backward produces gradients
from the last layer to the first, and the last layer's gradient is final long before the first
layer's is computed. Launch each parameter's all-reduce asynchronously
(``dist.all_reduce(grad, async_op=True)`` returns a handle) the moment its gradient is ready,
and communication overlaps the rest of the backward; wait for the handles only at the end.

``Tensor.register_post_accumulate_grad_hook(hook)`` calls ``hook(param)`` once ``param.grad`` is
complete for this backward. See handout/README.md, §3.4.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.4 ddp_overlap_individual"


class DDPIndividualParameters(torch.nn.Module):
    """A data-parallel wrapper of any ``module``; each gradient's all-reduce starts during the backward.

    Used on every rank as:

        ddp = DDPIndividualParameters(model)          # adapters.get_ddp(model)
        optimizer = torch.optim.AdamW(ddp.parameters(), ...)
        for each step:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x_of_this_rank), y_of_this_rank)
            loss.backward()                           # all-reduces launched from inside
            ddp.finish_gradient_synchronization()     # adapters.ddp_on_after_backward
            optimizer.step()

    Contract:

    - ``__init__(module)``: keep ``module`` as ``self.module`` (its parameters are this wrapper's
      parameters); broadcast rank 0's parameters and buffers to every rank, as in §3.2; then
      register, on every parameter that requires a gradient (each tensor once: a tied weight
      gets one hook), a hook that launches that gradient's asynchronous all-reduce as soon as
      the gradient is complete. A frozen parameter gets no hook (it cannot take one).
    - ``forward(*inputs, **kwargs)``: ``self.module(*inputs, **kwargs)``.
    - the hook keeps the handle and returns: waiting on it there would stop the backward until
      the all-reduce is done, and nothing would overlap.
    - ``finish_gradient_synchronization()``: wait for every all-reduce launched during this
      backward and divide each of those gradients by the world size, so that every ``.grad``
      holds its mean over the ranks, then forget those handles: the next step must not wait
      for, or divide, them again (with ``zero_grad(set_to_none=False)`` the same ``.grad``
      tensors live on from step to step). Parameters that got no gradient keep ``.grad`` None;
      frozen parameters are never all-reduced. Each gradient is sent, and stays, in its
      parameter's dtype (the tests train float64 and bfloat16 models too).

    The tests check the values (against one process training the whole batch, with either
    ``zero_grad`` mode), one all-reduce per gradient per step, the overlap (the all-reduce of a
    layer's gradient must be launched, and not waited on, before the backward reaches the layer
    below it), and that no handle of an old step is still held after a few steps.
    """

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        raise not_implemented(__file__, "DDPIndividualParameters.__init__", _SECTION)

    def forward(self, *inputs, **kwargs):
        """The wrapped module's forward, every positional and keyword argument passed on (``ddp(x=batch)`` is ``module(x=batch)``)."""
        raise not_implemented(__file__, "DDPIndividualParameters.forward", _SECTION)

    def finish_gradient_synchronization(self) -> None:
        raise not_implemented(__file__, "DDPIndividualParameters.finish_gradient_synchronization", _SECTION)
