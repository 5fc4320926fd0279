"""The trusted run for a config whose training state does not fit one process: PyTorch's FSDP2 over the ranks.

Read by ``run.py`` when ``config.trusted_fits`` is False (the official and trial configs: 8.1B
parameters' float32 weights, gradients and AdamW moments are 16 bytes a parameter, about
130 GB). It computes what ``trusted.py``'s single-process run computes, and gives it in the
same form (``{"initial", "losses", "params"}``, each parameter as ``compared`` gives it), so
that ``verdict.judge`` cannot tell which of the two it got.

How it stays the trusted run, not a second submission:

- it never imports or runs the submission: its ranks are started by part 2's launcher (the
  ranks' own, ``launch``) on an empty stand-in submission, and the job is :func:`trusted_rank`
  of this module;
- the model is the kit's (``build_model``: the same seed, the same device, so the same initial
  weights as the ranks'); each rank takes its rows of the global batch, as the ranks do;
- sharding is PyTorch's own ``fully_shard`` (FSDP2): one unit per block, one for the final
  norm with the head, the root for the embedding. Weights stay float32 and are gathered in
  float32; the compute dtype comes from ``torch.autocast``, as in the single-process run;
  gradients are reduce-scattered in float32 and averaged over the ranks (equal rows, so the
  average of the ranks' mean losses' gradients is the global batch's); the optimizer is
  ``torch.optim.AdamW`` on the shards, elementwise, so sharding does not change it;
- what makes 32768 tokens fit changes memory, not the function: every block is checkpointed
  (``torch.utils.checkpoint``); attention is the provided model's own function, applied
  ``ATTENTION_QUERY_BLOCK`` queries at a time through the model's documented ``attention_fn``
  hook (a fused kernel would round differently in bf16: on tiny_bf16 it moved the trusted
  updates 0.19 of their norm from the single-process run's, against 0.05 this way); the final
  norm, head and cross-entropy run ``HEAD_CHUNK_TOKENS`` tokens at a time, each chunk
  checkpointed. On the CPU tests (``leaderboard/tests/test_training_step_trusted_fsdp.py``)
  this run equals the single-process one within the config's tolerances;
- with ``config.trusted_offload`` on CUDA, FSDP2's ``CPUOffloadPolicy`` keeps the shards, their
  gradients and AdamW's moments in host memory and runs the optimizer there, so a GPU holds
  only gathered units and activations.

What comes back (the comparison's rule): rank 0's ``{"initial", "losses", "params"}``. Each
parameter is ``compared(name, ·, config)`` of the full tensor: whole where the config compares
every element, else the fixed sample of ``compared_indices``. A sample is assembled from the
shards without gathering the tensor: each rank fills the sampled elements that fall in its
rows (``Shard(0)``: contiguous rows, in rank order) and an all-reduce sums them; every sampled
element must be owned by exactly one rank, or the run raises.

Memory of the official config, estimated (not measured; 2 ranks, one row of 32768 tokens
each): host, 16 bytes x 4.05B parameters = 65 GB a rank (pinned); GPU, the block inputs kept by
checkpointing (34 x 32768 x 4096 float32 = 18 GB), one gathered unit and its gradient (the
head or the embedding: 2 x 2.5 GB), one block's recomputed activations and one head chunk
(about 6 GB each): about 35 to 40 GB a GPU. Without offload it would be about 100 GB a GPU.
"""

from __future__ import annotations

import tempfile
import types
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from executor.probes.parallel_launch import launch
from executor.probes.training_step import (build_model, compared, compared_indices, global_batch,
                                                 kit_model_module)

HEAD_CHUNK_TOKENS = 4096
"""Tokens whose logits exist at once (4096 x 151936 float32: 2.5 GB); fewer tokens still make two chunks."""


ATTENTION_QUERY_BLOCK = 512
"""Queries whose attention scores exist at once: (1, 32, 512, 32768) bf16 is 1 GiB a tensor on the official config."""


def attention_by_query_blocks(Q, K, V, mask):
    """The provided model's own attention, ``ATTENTION_QUERY_BLOCK`` queries at a time, each block checkpointed.

    Q, K, V: (batch, heads, seq, d_head); mask: (seq, seq), True where a query may see a key.
    Every query row is the provided ``scaled_dot_product_attention`` of that row over all the
    keys, the same operations on the same values, so the result is the model's (its bf16
    rounding included, which a fused kernel would change); only the (seq, seq) scores never
    exist whole. Returns (batch, heads, seq, d_head).
    """
    provided = kit_model_module().scaled_dot_product_attention
    seq = Q.shape[-2]
    block = min(ATTENTION_QUERY_BLOCK, max(1, (seq + 1) // 2))  # a tiny run still goes through two blocks
    return torch.cat([checkpoint(provided, Q[..., start:start + block, :], K, V, mask[start:start + block],
                                 use_reentrant=False)  # (batch, heads, block, d_head)
                      for start in range(0, seq, block)], dim=-2)


class HeadLoss(nn.Module):
    """The final norm, the LM head and the summed cross-entropy of (tokens, d_model), a chunk at a time."""

    def __init__(self, ln_final: nn.Module, lm_head: nn.Module):
        super().__init__()
        self.ln_final, self.lm_head = ln_final, lm_head

    def _chunk(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.ln_final(h))  # (chunk, vocab)
        return F.cross_entropy(logits.float(), targets, reduction="sum")

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        chunk = min(HEAD_CHUNK_TOKENS, max(1, (h.shape[0] + 1) // 2))
        total = h.new_zeros((), dtype=torch.float32)
        for start in range(0, h.shape[0], chunk):
            total = total + checkpoint(self._chunk, h[start:start + chunk], targets[start:start + chunk],
                                       use_reentrant=False)
        return total


class LossModel(nn.Module):
    """(inputs, targets) of shape (rows, seq) -> the mean cross-entropy of the provided model over those tokens."""

    def __init__(self, model: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.token_embeddings, self.layers = model.token_embeddings, model.layers
        self.head = HeadLoss(model.ln_final, model.lm_head)
        self.dtype = dtype

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=inputs.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            x = self.token_embeddings(inputs)  # (rows, seq, d_model)
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False)  # (rows, seq, d_model)
            total = self.head(x.flatten(0, 1), targets.flatten())  # summed over rows * seq tokens
        return total / targets.numel()


def _shard(model: nn.Module, config: dict, device: str) -> LossModel:
    """``model`` sharded in place with ``fully_shard``; returns the module whose forward is the loss."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    for layer in model.layers:
        layer.attn.attention_fn = attention_by_query_blocks
    cuda = device.startswith("cuda")
    mesh = init_device_mesh("cuda" if cuda else "cpu", (config["world_size"],))
    offload = CPUOffloadPolicy() if config["trusted_offload"] and cuda else OffloadPolicy()
    net = LossModel(model, getattr(torch, config["compute_dtype"]))
    for unit in (*net.layers, net.head, net):  # the root last: it holds the embedding
        fully_shard(unit, mesh=mesh, offload_policy=offload)
    return net


def _named_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The model's parameters under the provided model's names, read from their modules (sharding
    replaces each parameter by a DTensor one, but keeps the modules)."""
    return {f"{prefix}.{attr}" if prefix else attr: getattr(module, attr)
            for prefix, module in model.named_modules() for attr, _ in module.named_parameters(recurse=False)}


def _sampled(name: str, param, first_row: int, config: dict, comm_device: str) -> torch.Tensor:
    """``compared(name, full tensor, config)`` from this rank's rows [first_row, ...) of a Shard(0) parameter."""
    local = param.to_local().detach()  # (this rank's rows, ...)
    numel = param.numel()
    sample = compared_indices(name, numel, config)
    indices = torch.arange(numel) if sample is None else sample  # (n,) flat indices into the full tensor
    row = numel // param.shape[0]  # elements a row
    start = first_row * row
    mine = (indices >= start) & (indices < start + local.numel())  # (n,), bool
    values = torch.zeros(indices.numel(), dtype=torch.float32)
    values[mine] = local.reshape(-1)[(indices[mine] - start).to(local.device)].float().cpu()
    both = torch.stack([values, mine.float()]).to(comm_device)  # (2, n): the values, who owns each
    dist.all_reduce(both)  # each element is filled by its one owner; the others add 0
    values, owners = both.cpu()
    if not torch.equal(owners, torch.ones_like(owners)):
        raise RuntimeError(f"{name}: {int((owners != 1).sum())} sampled elements are not owned by exactly one rank; "
                           "the shards are not contiguous rows in rank order (Shard(0))")
    return values.reshape(param.shape) if sample is None else values


def trusted_rank(_stand_in, *, rank: int, world_size: int, device: str, config: dict) -> dict:
    """One rank of the trusted FSDP run (a job of parallel_launch); rank 0 returns {"initial", "losses", "params"}."""
    model = build_model(config, device)
    initial = {name: compared(name, p, config) for name, p in model.named_parameters()} if rank == 0 else None
    inputs, targets = global_batch(config)
    rows = config["batch_size"] // world_size
    x = inputs[rank * rows:(rank + 1) * rows].to(device)  # (rows, seq)
    y = targets[rank * rows:(rank + 1) * rows].to(device)  # (rows, seq)
    net = _shard(model, config, device)
    optimizer = torch.optim.AdamW(net.parameters(), **dict(config["optimizer"]))
    losses = []
    for _ in range(config["gate_steps"]):
        optimizer.zero_grad(set_to_none=True)
        loss = net(x, y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the ranks' means, summed: equal rows, so / world_size is the batch's mean
        losses.append(mean.item() / world_size)
    params = _named_parameters(model)
    rows_of = torch.tensor([p.to_local().shape[0] for p in params.values()], device=device)  # (parameters,)
    every = [torch.empty_like(rows_of) for _ in range(world_size)]
    dist.all_gather(every, rows_of)  # each rank's row count of each parameter
    first_rows = torch.stack(every)[:rank].sum(dim=0).tolist()  # (parameters,): where this rank's rows begin
    sampled = {name: _sampled(name, p, first, config, device) for (name, p), first in zip(params.items(), first_rows)}
    return {"initial": initial, "losses": losses, "params": sampled} if rank == 0 else {}


def trusted_fsdp_run(config: dict, backend: str = "gloo") -> dict:
    """The trusted run of ``config`` (a step config's dict) on ``config["world_size"]`` ranks; trusted.py's form.

    Raises RuntimeError when a rank fails or the run outlives ``config["time_limit_s"]``: a
    fault of the harness or the machine, never of a submission (none takes part).
    """
    with tempfile.TemporaryDirectory(prefix="trusted-fsdp-") as stand_in:
        # The launcher imports a submission's adapters before the job: this one is empty.
        (Path(stand_in) / "cs336_systems").mkdir()
        (Path(stand_in) / "cs336_systems" / "__init__.py").write_text("")
        (Path(stand_in) / "adapters.py").write_text('"""No submission: the trusted FSDP run\'s stand-in."""\n')
        result = launch(lambda: types.SimpleNamespace(__file__=str(Path(stand_in) / "adapters.py")),
                        f"{__name__}.trusted_rank", config["world_size"], {"config": config},
                        backend=backend, timeout_s=config["time_limit_s"])
    if result["timed_out"]:
        raise RuntimeError(f"the trusted FSDP run ({config['name']}) did not finish in {config['time_limit_s']:.0f} s")
    if result["errors"]:
        raise RuntimeError(f"the trusted FSDP run ({config['name']}) failed:\n" + "\n".join(
            f"rank {rank}: {text.strip()[-2000:]}" for rank, text in sorted(result["errors"].items())))
    return result["ranks"][0]["value"]
