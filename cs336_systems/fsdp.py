"""§3.7 fsdp: fully-sharded data parallel training of a model's Linear and Embedding layers.

DDP keeps a full copy of every weight on every rank. FSDP keeps only a slice (a *shard*) of
each large weight per rank, and assembles a layer's full weight with an all-gather just before
the layer needs it, in the forward and again in the backward, freeing it after use. The
gradient of a full weight is *reduce-scattered*: each rank receives the sum over ranks of its
own shard's slice of the gradient. Each rank's optimizer then updates only its shards.

Mixed precision: given a ``compute_dtype`` (torch.float16 or bfloat16), shards stay in float32
(the *master weights* the optimizer updates, since repeated small updates are lost in 16 bits)
but are cast to the compute dtype *before* the all-gather (half the bytes to send) and used in
that dtype; gradients reach the shards in float32.

Runs on every rank after ``torch.distributed.init_process_group``; call collectives through
``torch.distributed`` (``all_gather_into_tensor``, ``reduce_scatter_tensor``, ...).
See handout/README.md, §3.7.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.7 fsdp"


class FSDP(torch.nn.Module):
    """A fully-sharded data-parallel wrapper of any ``module``.

    Used on every rank as:

        fsdp = FSDP(model, compute_dtype=None)        # adapters.get_fsdp
        optimizer = torch.optim.AdamW(fsdp.parameters(), ...)
        for each step:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(fsdp(x_of_this_rank), y_of_this_rank).backward()
            fsdp.finish_gradient_synchronization()    # adapters.fsdp_on_after_backward
            optimizer.step()
        full = fsdp.gather_full_params()              # adapters.fsdp_gather_full_params (every rank)

    Contract:

    - ``__init__(module, compute_dtype=None)``: keep ``module`` as ``self.module``; broadcast
      rank 0's parameters and buffers (as in §3.2). A *sharded layer* is a submodule whose class
      is named ``Linear`` or ``Embedding`` (the provided model's, or any other library's) and
      that has a ``weight`` Parameter. Replace each sharded layer's ``weight`` by this rank's
      shard: a float32 Parameter still registered as that layer's ``weight`` (so
      ``fsdp.parameters()`` and ``self.module.named_parameters()`` yield the shards), holding at
      most ceil(numel / world_size) elements of the weight, or ceil(rows / world_size) rows.
      Every other parameter (norm gains, biases) stays whole on every rank (*replicated*).
    - forward: each sharded layer computes with its full weight, all-gathered (in the compute
      dtype, if given) before the layer runs. You may launch a layer's gather early so it
      travels while earlier layers compute, but not too early: the gather of the k-th sharded
      layer of the forward may start only after the (k-2)-th has finished its forward (at most
      two layers ahead). After a layer's forward, free its full weight; at the end of the
      forward only the shards remain. Autograd keeps the full weight it saved for the backward:
      free it by releasing its storage (``untyped_storage().resize_(0)``), not by dropping your
      reference (the tests count the saved full weights that still hold memory).
    - backward: gather each sharded layer's full weight again for its backward (same window:
      at most two layers ahead in the backward's order), then reduce-scatter the gradient of the
      full weight so that each shard's ``.grad`` (float32, the shard's shape) holds its slice of
      the mean over the ranks; free the full weight. Replicated parameters' gradients are
      all-reduced and averaged, as in DDP.
    - ``finish_gradient_synchronization()``: wait for any communication still in flight, so that
      every ``.grad`` holds its mean when it returns.
    - ``gather_full_params()``: ``{name: full float32 tensor}`` for every parameter of
      ``self.module`` (names as in ``self.module.named_parameters()``), sharded ones all-gathered
      from the shards, replicated ones as they are. A collective: every rank calls it.
    - ``forward(*inputs, **kwargs)`` returns ``self.module(*inputs, **kwargs)``.

    Each sharded layer is called once per forward and no two share a weight. The tests check
    the values against one process training the whole batch (with the same casts when a
    compute dtype is given), the shards' sizes and dtype, the gathers' sizes, dtypes and
    timing (the window above, in the forward and in the backward) and the reduce-scatters.
    """

    def __init__(self, module: torch.nn.Module, compute_dtype: torch.dtype | None = None):
        super().__init__()
        raise not_implemented(__file__, "FSDP.__init__", _SECTION)

    def forward(self, *inputs, **kwargs):
        """The wrapped module's forward, every positional and keyword argument passed on (``fsdp(tokens=batch)`` is ``module(tokens=batch)``)."""
        raise not_implemented(__file__, "FSDP.forward", _SECTION)

    def finish_gradient_synchronization(self) -> None:
        raise not_implemented(__file__, "FSDP.finish_gradient_synchronization", _SECTION)

    def gather_full_params(self) -> dict[str, torch.Tensor]:
        raise not_implemented(__file__, "FSDP.gather_full_params", _SECTION)
