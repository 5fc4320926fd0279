"""§3.5 ddp_bucketed: DDP that all-reduces gradients in buckets, each launched once its gradients are ready.

Reference solution. One all-reduce per parameter overlaps well but pays a collective's fixed
cost per tensor; one flat all-reduce pays it once but cannot start before the backward ends.
Buckets sit in between: parameters are grouped, in the reverse of ``module.parameters()``'s
order (about the order the backward produces their gradients), into buckets of at most
``bucket_size_mb`` MiB; when the last gradient of a bucket arrives, the bucket's gradients are
flattened into one buffer whose all-reduce starts at once, while the backward goes on.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def plan_buckets(params: list[torch.Tensor], bucket_size_mb: float | None) -> list[list[int]]:
    """Indices into ``params`` of each bucket, filled in the reverse of ``params``' order.

    A bucket is closed when adding the next parameter would take it over
    ``bucket_size_mb * 2**20`` bytes; a parameter larger than that gets a bucket of its own.
    ``None`` puts every parameter in one bucket.
    """
    limit = None if bucket_size_mb is None else bucket_size_mb * 2**20
    buckets: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index in reversed(range(len(params))):
        size = params[index].numel() * params[index].element_size()
        if current and limit is not None and current_bytes + size > limit:
            buckets.append(current)
            current, current_bytes = [], 0
        current.append(index)
        current_bytes += size
    if current:
        buckets.append(current)
    return buckets


class DDPBucketed(torch.nn.Module):
    """Wraps ``module`` for data-parallel training with bucketed, overlapped all-reduces."""

    def __init__(self, module: torch.nn.Module, bucket_size_mb: float | None):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = plan_buckets(self.params, bucket_size_mb)
        self._bucket_of = {index: b for b, bucket in enumerate(self.buckets) for index in bucket}
        self._ready = [0] * len(self.buckets)
        self._pending: dict[int, tuple[dist.Work, torch.Tensor, list[torch.Tensor]]] = {}
        for index, param in enumerate(self.params):
            param.register_post_accumulate_grad_hook(lambda p, index=index: self._on_grad_ready(index))

    def _on_grad_ready(self, index: int) -> None:
        bucket = self._bucket_of[index]
        self._ready[bucket] += 1
        if self._ready[bucket] == len(self.buckets[bucket]):
            self._launch(bucket)  # safe now: every gradient of this bucket is complete

    def _launch(self, bucket: int) -> None:
        grads = [self.params[i].grad for i in self.buckets[bucket] if self.params[i].grad is not None]
        if not grads:
            return
        flat = _flatten_dense_tensors(grads)  # (bucket numel,)
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
        self._pending[bucket] = (work, flat, grads)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def on_train_batch_start(self) -> None:
        """Forget the previous step's bookkeeping (called at the start of every training step)."""
        self._ready = [0] * len(self.buckets)
        self._pending.clear()

    def finish_gradient_synchronization(self) -> None:
        """Launch the buckets whose gradients never all arrived, wait for every bucket, write back the means."""
        for bucket in range(len(self.buckets)):
            if bucket not in self._pending:
                self._launch(bucket)  # some parameter got no gradient this step (unused in the forward)
        for work, flat, grads in self._pending.values():
            work.wait()
            flat.div_(self.world_size)
            for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads)):
                grad.copy_(averaged)
        self.on_train_batch_start()
