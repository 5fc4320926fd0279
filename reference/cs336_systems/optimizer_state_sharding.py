"""§3.6 optimizer_state_sharding: each rank keeps the optimizer state of only its share of the parameters.

Reference solution (ZeRO stage 1). AdamW keeps two float32 tensors per parameter, twice the
model's size, on every rank. Here each parameter is owned by one rank, chosen so that ranks own
about equal numbers of elements; a rank's local optimizer (an instance of the wrapped class)
holds only the parameters it owns, so only it has their state. After the local step every
parameter is broadcast from its owner, and all ranks hold the same parameters again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist


class ShardedOptimizer(torch.optim.Optimizer):
    """``optimizer_cls`` with its state sharded across ranks; see ``cs336_systems/optimizer_state_sharding.py``."""

    def __init__(self, params: Iterable, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.local_optimizer: torch.optim.Optimizer | None = None
        self.owner: dict[torch.Tensor, int] = {}
        self._load = [0] * self.world_size  # elements owned by each rank
        # Optimizer.__init__ calls self.add_param_group for each group: that assigns the owners.
        super().__init__(params, defaults=dict(kwargs))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group on every rank; its parameters get owners, and this rank's share joins the local optimizer."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        # Largest first, each to the least-loaded rank: the same deterministic choice on every rank.
        for param in sorted(group["params"], key=lambda p: -p.numel()):
            if param in self.owner:
                continue
            owner = min(range(self.world_size), key=lambda r: (self._load[r], r))
            self.owner[param] = owner
            self._load[owner] += param.numel()
        mine = [p for p in group["params"] if self.owner[p] == self.rank]
        local_group = {**{k: v for k, v in group.items() if k != "params"}, "params": mine}
        if self.local_optimizer is None:
            self.local_optimizer = self.optimizer_cls([local_group], **self.kwargs)
        else:
            self.local_optimizer.add_param_group(local_group)

    @torch.no_grad()
    def step(self, closure=None, **kwargs: Any):
        """Step this rank's parameters with the local optimizer, then broadcast every parameter from its owner."""
        loss = self.local_optimizer.step(closure, **kwargs) if closure is not None else self.local_optimizer.step(**kwargs)
        for group in self.param_groups:
            for param in group["params"]:
                dist.broadcast(param.data, src=self.owner[param])
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter (owned or not)."""
        super().zero_grad(set_to_none=set_to_none)
