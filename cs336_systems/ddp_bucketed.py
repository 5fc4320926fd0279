"""§3.5 ddp_bucketed: DDP that all-reduces gradients in buckets, each as soon as it is full.

§3.4 overlaps communication with the backward but pays a collective's fixed cost per tensor;
§3.3 pays it once but cannot start before the backward ends. Buckets sit in between: group
the parameters into buckets of at most ``bucket_size_mb`` MiB, and when the last gradient of a
bucket is ready, flatten the bucket's gradients into one buffer and launch its asynchronous
all-reduce. PyTorch's own DistributedDataParallel works this way (``bucket_cap_mb``).
See handout/README.md, §3.5.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.5 ddp_bucketed"


class DDPBucketed(torch.nn.Module):
    """A data-parallel wrapper of any ``module`` whose gradients are all-reduced in buckets during the backward.

    Used on every rank like §3.4's wrapper, plus a call at the start of each step:

        ddp = DDPBucketed(model, bucket_size_mb=25)   # adapters.get_ddp_bucketed
        for each step:
            ddp.on_train_batch_start()                # adapters.ddp_bucketed_on_train_batch_start
            optimizer.zero_grad(set_to_none=True)
            loss_fn(ddp(x), y).backward()
            ddp.finish_gradient_synchronization()     # adapters.ddp_bucketed_on_after_backward
            optimizer.step()

    Contract:

    - ``__init__(module, bucket_size_mb)``: keep ``module`` as ``self.module``; broadcast rank
      0's parameters and buffers (§3.2); assign the parameters that require a gradient (each
      tensor once, as ``module.parameters()`` yields them) to buckets, walking them in
      **reverse** order (about the order the backward produces their gradients): add each
      parameter to the current bucket, except that when it would take the bucket's size over
      ``bucket_size_mb * 2**20`` bytes (``numel * element_size`` summed), the current bucket is
      closed first and the parameter starts a new one. A bucket always holds at least one
      parameter, so a parameter larger than the limit gets a bucket of its own; exactly at the
      limit still fits. ``bucket_size_mb=None`` puts every parameter in one bucket.
    - during the backward, once every gradient of a bucket is ready, flatten them into one
      buffer (in the gradients' own dtype, float64 gradients go out as float64, and on their
      device: NCCL communicates CUDA tensors only) and launch one
      asynchronous all-reduce of it: one all-reduce per bucket per step.
    - ``finish_gradient_synchronization()``: launch the buckets that never filled (a parameter
      of theirs got no gradient this step: all-reduce the gradients that exist, leave the
      missing ones None), wait for every bucket, divide by the world size and copy the means
      back into the parameters' ``.grad``, each in its own dtype (the tests train float64 and
      bfloat16 models too).
    - ``on_train_batch_start()``: reset whatever per-step bookkeeping you keep. No handle or
      buffer of an old step may outlive the next step's synchronisation (the tests train several
      steps, with ``zero_grad(set_to_none=False)`` too). A frozen parameter belongs to no bucket.
    - ``forward(*inputs, **kwargs)``: ``self.module(*inputs, **kwargs)``.

    The same parameters get gradients on every rank (they do in every test).
    """

    def __init__(self, module: torch.nn.Module, bucket_size_mb: float | None):
        super().__init__()
        raise not_implemented(__file__, "DDPBucketed.__init__", _SECTION)

    def forward(self, *inputs, **kwargs):
        """The wrapped module's forward, every positional and keyword argument passed on (``ddp(x=batch)`` is ``module(x=batch)``)."""
        raise not_implemented(__file__, "DDPBucketed.forward", _SECTION)

    def on_train_batch_start(self) -> None:
        raise not_implemented(__file__, "DDPBucketed.on_train_batch_start", _SECTION)

    def finish_gradient_synchronization(self) -> None:
        raise not_implemented(__file__, "DDPBucketed.finish_gradient_synchronization", _SECTION)
