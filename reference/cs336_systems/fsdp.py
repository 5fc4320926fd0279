"""§3.7 fsdp: fully-sharded data parallel training of any module's Linear and Embedding layers.

Reference solution. Every rank keeps only a 1/world_size slice (its shard) of each Linear and
Embedding weight, in float32: the "master" weight that the optimizer updates. A layer's full
weight exists only while the layer computes:

- forward: just before a layer runs, its shards are all-gathered (cast to the compute dtype
  first, which halves the bytes sent in 16-bit), and the next layer's gather is launched
  asynchronously, so it travels while this layer computes (one layer ahead: the window allows
  at most two). After the layer, the full weight's memory is released (its storage is resized
  to 0; autograd keeps only the empty shell it saved);
- backward: when the gradient reaches a layer's output, its full weight is gathered again into
  that same storage (and the next layer of the backward is prefetched); the gradient of the
  full weight is reduce-scattered, so each rank receives the sum of its shard's gradients,
  divided by the world size, in float32, and the full weight is released again.

Other parameters (RMSNorm gains, biases) are small: they are replicated, and their gradients
are all-reduced as the backward produces them. ``finish_gradient_synchronization`` waits for
those. Gathers and reduce-scatters block the Python thread here; with NCCL they are enqueued
on the GPU's communication stream and overlap the computation anyway.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

SHARDED_LAYER_TYPES = ("Linear", "Embedding")
"""A layer whose class has one of these names and that has a ``weight`` parameter is sharded."""


def _all_gather(output: torch.Tensor, shard: torch.Tensor, async_op: bool = False):
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, shard, async_op=async_op)


def _reduce_scatter(output: torch.Tensor, full: torch.Tensor):
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, full, op=dist.ReduceOp.SUM)


class ShardedLayer:
    """One sharded weight: its float32 shard (a Parameter of the layer) and, while in use, its full copy."""

    def __init__(self, name: str, layer: torch.nn.Module, compute_dtype: torch.dtype | None):
        self.name, self.layer = name, layer
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        weight = layer.weight
        self.shape, self.numel = weight.shape, weight.numel()
        self.shard_numel = math.ceil(self.numel / self.world_size)
        self.dtype = compute_dtype or weight.dtype
        flat = torch.zeros(self.shard_numel * self.world_size, dtype=weight.dtype, device=weight.device)
        flat[: self.numel] = weight.detach().reshape(-1)  # padded to a multiple of world_size
        shard = flat[self.rank * self.shard_numel : (self.rank + 1) * self.shard_numel].clone()
        self.shard = torch.nn.Parameter(shard, requires_grad=weight.requires_grad)
        layer._parameters["weight"] = self.shard  # the optimizer sees (and updates) only the shard
        self.full: torch.Tensor | None = None  # (shard_numel * world_size,) in the compute dtype, while gathered
        self._work = None

    # -- all-gather ---------------------------------------------------------------------

    def launch_gather(self) -> None:
        """Start gathering the full weight (no-op if it is gathered or on its way)."""
        if self._work is not None or (self.full is not None and self.full.untyped_storage().size() > 0):
            return
        shard = self.shard.detach().to(self.dtype)  # cast before sending: fewer bytes in 16-bit
        if self.full is None:
            self.full = torch.empty(self.shard_numel * self.world_size, dtype=self.dtype, device=shard.device)
        else:  # the shell autograd saved: give it its memory back and refill it in place
            self.full.untyped_storage().resize_(self.full.numel() * self.full.element_size())
        # Write through .data: autograd must not count the refill as a change of the tensor it saved.
        self._work = _all_gather(self.full.data, shard, async_op=True)

    def wait(self) -> torch.Tensor:
        """The full weight, (*shape) in the compute dtype, once its gather has arrived."""
        self.launch_gather()
        if self._work is not None:  # None: still gathered from an earlier call
            self._work.wait()
            self._work = None
        return self.full[: self.numel].view(self.shape)

    def free(self) -> None:
        """Release the full weight's memory (the tensor object survives, empty, inside autograd's graph)."""
        if self.full is not None:
            self.full.untyped_storage().resize_(0)

    def forget(self) -> None:
        """Drop the full weight entirely (after a backward, or for a forward without autograd)."""
        self.full = None


class _UseFullWeight(torch.autograd.Function):
    """Forward: the layer's full weight from its shard. Backward: reduce-scatter its gradient to the shard."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, unit: ShardedLayer) -> torch.Tensor:
        ctx.unit = unit
        return unit.wait()

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        unit: ShardedLayer = ctx.unit
        unit.free()  # the layer's backward, the only user of the full weight, has run
        flat = torch.zeros(unit.shard_numel * unit.world_size, dtype=torch.float32, device=grad_full.device)
        flat[: unit.numel] = grad_full.reshape(-1)  # reduce in float32: the master weights' precision
        grad_shard = torch.empty(unit.shard_numel, dtype=torch.float32, device=grad_full.device)
        _reduce_scatter(grad_shard, flat)
        return grad_shard.div_(unit.world_size).to(unit.shard.dtype), None


class FSDP(torch.nn.Module):
    """Wraps ``module`` for fully-sharded data parallel training; see ``cs336_systems/fsdp.py``."""

    def __init__(self, module: torch.nn.Module, compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)  # every rank shards the same weights
        self.units: list[ShardedLayer] = []
        for name, layer in module.named_modules():
            weight = layer._parameters.get("weight")
            if type(layer).__name__ in SHARDED_LAYER_TYPES and isinstance(weight, torch.nn.Parameter):
                unit = ShardedLayer(name, layer, compute_dtype)
                self.units.append(unit)
                layer.register_forward_pre_hook(lambda layer, args, unit=unit: self._before_forward(unit))
                layer.register_forward_hook(lambda layer, args, output, unit=unit: self._after_forward(unit, output))
        self._order: list[ShardedLayer] = []  # the order the last forward used the layers in
        self._seen: list[ShardedLayer] = []
        sharded = {id(unit.shard) for unit in self.units}
        self.replicated = [p for p in module.parameters() if id(p) not in sharded and p.requires_grad]
        self._pending: list[tuple[dist.Work, torch.Tensor]] = []
        for param in self.replicated:
            param.register_post_accumulate_grad_hook(self._all_reduce_replicated)

    # -- forward ------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        self._seen = []
        out = self.module(*inputs, **kwargs)
        self._order = self._seen
        return out

    def _next(self, unit: ShardedLayer, order: list[ShardedLayer]) -> ShardedLayer | None:
        if unit in order and order.index(unit) + 1 < len(order):
            return order[order.index(unit) + 1]
        return None

    def _before_forward(self, unit: ShardedLayer) -> None:
        self._seen.append(unit)
        following = self._next(unit, self._order)
        full = _UseFullWeight.apply(unit.shard, unit) if torch.is_grad_enabled() else unit.wait()
        if following is not None:
            following.launch_gather()  # one layer ahead: travels while this layer computes
        unit.layer.__dict__["weight"] = full  # shadows the shard Parameter while the layer runs

    def _after_forward(self, unit: ShardedLayer, output) -> None:
        del unit.layer.__dict__["weight"]
        unit.free()
        if not torch.is_grad_enabled():
            unit.forget()
            return
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad, unit=unit: self._before_backward(unit))

    # -- backward -----------------------------------------------------------------------

    def _before_backward(self, unit: ShardedLayer) -> None:
        unit.wait()  # refill the storage autograd saved, before the layer's backward reads it
        following = self._next(unit, self._order[::-1])
        if following is not None:
            following.launch_gather()

    def _all_reduce_replicated(self, param: torch.Tensor) -> None:
        work = dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, async_op=True)
        self._pending.append((work, param.grad))

    def finish_gradient_synchronization(self) -> None:
        """Wait for the replicated parameters' all-reduces and average them; drop the gathered weights."""
        for work, grad in self._pending:
            work.wait()
            grad.div_(self.world_size)
        self._pending.clear()
        for unit in self.units:
            unit.forget()

    # -- checkpoints --------------------------------------------------------------------

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """{name: full float32 tensor} for every parameter of the wrapped module (a collective: call on all ranks)."""
        full = {}
        by_shard = {id(unit.shard): unit for unit in self.units}
        for name, param in self.module.named_parameters():
            unit = by_shard.get(id(param))
            if unit is None:
                full[name] = param.detach().clone()
                continue
            flat = torch.empty(unit.shard_numel * unit.world_size, dtype=param.dtype, device=param.device)
            _all_gather(flat, param.detach())
            full[name] = flat[: unit.numel].view(unit.shape).clone()
        return full
