"""§3.2 naive_ddp: data-parallel training by all-reducing each gradient after the backward.

In data-parallel training every rank (process) holds a full copy of the model and trains on
its own slice of each batch. Two collectives make the copies behave like one model trained on
the whole batch:

1. before training, every rank's parameters and buffers are overwritten with rank 0's
   (``broadcast_parameters``), since ranks may have initialised them differently;
2. after every ``loss.backward()`` and before ``optimizer.step()``, each gradient is replaced by
   its mean over the ranks (``all_reduce_gradients``). Each rank's loss is a mean over its own
   slice, so the mean of the ranks' gradients is the gradient of the mean loss over the whole
   batch (when slices are equal).

Both functions run on every rank, after ``torch.distributed.init_process_group``, on the
default process group. Call collectives through ``torch.distributed`` (``dist.broadcast``,
``dist.all_reduce``); the tests log each call. See handout/README.md, §3.2.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.2 naive_ddp"


def broadcast_parameters(module: torch.nn.Module, src: int = 0) -> None:
    """Overwrite, in place, every parameter and buffer of ``module`` with rank ``src``'s.

    Every parameter counts, frozen ones (``requires_grad=False``) included, and every buffer
    (``module.buffers()``). A parameter shared by two layers (tied weights) is one tensor:
    ``module.parameters()`` yields it once. After the call every rank's ``module.state_dict()``
    equals rank ``src``'s exactly. Update the tensors in place (``tensor.data`` or under
    ``torch.no_grad()``): the optimizer holds references to them.
    """
    raise not_implemented(__file__, "broadcast_parameters", _SECTION)


def all_reduce_gradients(module: torch.nn.Module) -> None:
    """Replace each parameter's ``.grad`` by its mean over all ranks: one all-reduce per gradient.

    For every parameter of ``module`` whose ``.grad`` is not None (each tensor once, so a tied
    weight is reduced once), sum the gradient over the ranks with ``dist.all_reduce`` and divide
    it by the world size, in place. Parameters without a gradient (frozen, or unused by the
    forward) keep ``.grad`` None. Returns after every gradient holds its mean. Each gradient is
    sent, and stays, in its parameter's dtype (the tests train float32, float64 and bfloat16
    models).
    """
    raise not_implemented(__file__, "all_reduce_gradients", _SECTION)
