"""Probes for the DDP tests (§3.2 to §3.5): train a model with the submission's DDP on several ranks.

Read by harness/ddp_checks.py, which sends a model's name, rank 0's initial state, the whole
batch and the training settings, and judges what comes back. Every rank starts from a
different state (rank 0's is the one sent; see ``parallel_models.perturbed``) when the variant
must broadcast, trains on its own slice of the batch (rank r takes rows r*n/world_size to
(r+1)*n/world_size), and reports its parameters and buffers right after wrapping, its
gradients after the first step's synchronisation, its final state, and its event log (see
``parallel_launch``) with these markers: ("step", s), ("backward_begin", s),
("backward_end", s), ("synced", s), plus ("backward_reached", layer) from the models, the
("wait", ...) events of the collectives' handles, and after each step's synchronisation
("live_handles", s, launch indices of the asynchronous handles the submission still holds).
Gradients are cleared with ``zero_grad(set_to_none=...)`` as the settings say (True unless
asked otherwise).

Variants and the adapters they call:

    naive        run_naive_ddp_broadcast_parameters(model), then per step
                 run_naive_ddp_all_reduce_gradients(model) after the backward
    flat         run_ddp_flat_all_reduce_gradients(model) after the backward (ranks start equal)
    individual   get_ddp(model) and ddp_on_after_backward(ddp, optimizer) (2026 names), or with
                 api="2025" get_ddp_individual_parameters and ddp_individual_parameters_on_after_backward
    bucketed     get_ddp_bucketed(model, bucket_size_mb), ddp_bucketed_on_train_batch_start at the
                 start of each step and ddp_bucketed_on_after_backward after the backward
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import parallel_models as models
from .parallel_launch import launch, live_handles, record

VARIANTS = ("naive", "flat", "individual", "bucketed")


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """``torch.optim.<name>`` ("SGD" or "AdamW", the latter with weight decay 0.1)."""
    if name == "SGD":
        return torch.optim.SGD(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.1)


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}


def grads_of(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: None if p.grad is None else p.grad.detach().cpu().clone()
            for name, p in model.named_parameters(remove_duplicate=False)}


def optimizer_state_of(optimizers, names: dict[int, str]) -> dict[str, torch.Tensor]:
    """{"<parameter name>.<state key>": tensor} of the tensors in ``optimizers``' state (names: id(param) -> name)."""
    flat = {}
    for optimizer in optimizers:
        for param, state in optimizer.state.items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    flat[f"{names.get(id(param), '<not a parameter of the model>')}.{key}"] = value.detach().cpu().clone()
    return flat


def train_rank(adapters, *, rank: int, world_size: int, device: str, variant: str, model: str,
               init_state: dict, inputs: torch.Tensor, targets: torch.Tensor, steps: int, optimizer: str,
               lr: float, bucket_size_mb: float | None = None, api: str = "2026", set_to_none: bool = True,
               dtype: str | None = None, keyword_input: bool = False) -> dict:
    """One rank's training run (a job of ``parallel_launch``).

    ``dtype`` ("float64", say): the model's parameters and buffers are cast to it before the
    initial state is loaded (so an ``init_state`` sent in that dtype keeps every digit), and the
    floating inputs and targets are cast to it; the states and gradients reported keep their dtype.
    ``keyword_input``: the wrapped model is called as ``wrapped(x=inputs)`` (a module's forward
    takes keyword arguments; the toy models name their input ``x``).
    """
    net = models.build(model, make_lm=lambda: adapters.get_transformer_lm(model_overrides=models.LM_OVERRIDES))
    if dtype is not None:
        net.to(getattr(torch, dtype))
    net.load_state_dict(init_state if variant == "flat" else models.perturbed(init_state, rank))
    net.to(device)
    if dtype is not None:
        inputs = inputs.to(getattr(torch, dtype)) if inputs.is_floating_point() else inputs
        targets = targets.to(getattr(torch, dtype)) if targets.is_floating_point() else targets  # CUDA's losses refuse mixed dtypes
    per_rank = inputs.shape[0] // world_size
    x = inputs[rank * per_rank:(rank + 1) * per_rank].to(device)
    y = targets[rank * per_rank:(rank + 1) * per_rank].to(device)

    after_sync: Callable[[Any, torch.optim.Optimizer], None]
    at_start: Callable[[Any, torch.optim.Optimizer], None] = lambda wrapped, opt: None
    if variant == "naive":
        adapters.run_naive_ddp_broadcast_parameters(net)
        wrapped, after_sync = net, lambda wrapped, opt: adapters.run_naive_ddp_all_reduce_gradients(net)
    elif variant == "flat":
        wrapped, after_sync = net, lambda wrapped, opt: adapters.run_ddp_flat_all_reduce_gradients(net)
    elif variant == "individual" and api == "2025":
        wrapped = adapters.get_ddp_individual_parameters(net)
        after_sync = adapters.ddp_individual_parameters_on_after_backward
    elif variant == "individual":
        wrapped, after_sync = adapters.get_ddp(net), adapters.ddp_on_after_backward
    elif variant == "bucketed":
        wrapped = adapters.get_ddp_bucketed(net, bucket_size_mb)
        after_sync, at_start = adapters.ddp_bucketed_on_after_backward, adapters.ddp_bucketed_on_train_batch_start
    else:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    record("wrapped")
    after_wrap = state_of(net)
    opt = make_optimizer(optimizer, wrapped.parameters(), lr)
    grads = None
    for step in range(steps):
        record("step", step)
        at_start(wrapped, opt)
        opt.zero_grad(set_to_none=set_to_none)
        loss = models.loss_of(model, wrapped(x=x) if keyword_input else wrapped(x), y)
        record("backward_begin", step)
        loss.backward()
        record("backward_end", step)
        after_sync(wrapped, opt)
        record("synced", step)
        record("live_handles", step, tuple(live_handles()))
        if step == 0:
            grads = grads_of(net)
        opt.step()
    names = {id(p): name for name, p in net.named_parameters()}
    return {"after_wrap": after_wrap, "grads": grads, "final": state_of(net),
            "optimizer_state": optimizer_state_of([opt], names)}


def train(load_adapters, world_size: int, settings: dict, timeout_s: float = 60.0, backend: str = "gloo") -> dict:
    """``train_rank(**settings)`` on ``world_size`` ranks ("nccl": one GPU each); see ``parallel_launch.launch``."""
    return launch(load_adapters, "ddp.train_rank", world_size, settings, timeout_s=timeout_s, backend=backend)


PROBES = {"train": train}
