"""§3.6 optimizer_state_sharding: each rank keeps the optimizer state of only its share of the parameters.

AdamW keeps two float32 tensors per parameter (the moving averages of the gradient and of its
square): twice the model's size, on every rank of a data-parallel run. Sharding that state
(ZeRO stage 1) cuts it by the number of ranks: each parameter is *owned* by one rank, each
rank's optimizer holds only the parameters it owns, and after each step every parameter is
broadcast from its owner, so that all ranks hold the same parameters again.

Runs on every rank after ``torch.distributed.init_process_group``; call collectives through
``torch.distributed``. See handout/README.md, §3.6.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.6 optimizer_state_sharding"


class ShardedOptimizer(torch.optim.Optimizer):
    """``optimizer_cls`` with its state sharded across the ranks.

    ``ShardedOptimizer(params, optimizer_cls, **kwargs)`` (``adapters.get_sharded_optimizer``)
    behaves like ``optimizer_cls(params, **kwargs)`` on every rank (same parameters after every
    step, to float rounding), when every rank has the same gradients (after a DDP's
    synchronisation, or because every rank computed them on the same data):

    - ``params``: an iterable of tensors or of parameter-group dicts, as for any optimizer.
      Call ``super().__init__(params, defaults)``: ``torch.optim.Optimizer.__init__`` calls
      ``self.add_param_group`` for each group, so that is where sharding happens.
    - ``add_param_group(param_group)``: add the group (``super().add_param_group``), give each of
      its parameters one owner rank, and pass this rank's share of the group, with the group's
      own options (``lr``, ``weight_decay``, ...), to this rank's local optimizer: create it as
      ``optimizer_cls([that group], **kwargs)`` the first time, and call its
      ``add_param_group`` afterwards. Works for groups added after training has begun.
      Ownership must be the same on every rank (a deterministic rule), every parameter must
      have exactly one owner, and the ranks should own about equal numbers of elements; a rank
      may own nothing when there are fewer parameters than ranks.
    - ``step(closure=None, **kwargs)``: step the local optimizer (only the owned parameters
      change, and only their state exists on this rank), then broadcast every parameter from
      its owner. A ``closure`` (which clears the gradients, runs the forward and the backward,
      and returns the loss) goes to the local optimizer's step, which calls it once; return
      what the local step returns (the closure's loss).
    - ``zero_grad(set_to_none=True)``: clears every parameter's gradient (the inherited one does).

    The tests pass an ``optimizer_cls`` of their own (a subclass of AdamW or SGD that logs
    which parameters each instance steps), so they check that each rank's local optimizer
    steps only its own share and that the shares split the parameters exactly.
    """

    def __init__(self, params: Iterable, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any):
        raise not_implemented(__file__, "ShardedOptimizer.__init__", _SECTION)

    def step(self, closure=None, **kwargs: Any):
        raise not_implemented(__file__, "ShardedOptimizer.step", _SECTION)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise not_implemented(__file__, "ShardedOptimizer.add_param_group", _SECTION)
