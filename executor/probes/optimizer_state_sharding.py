"""Probes for the optimizer_state_sharding tests (§3.6): train with the submission's sharded optimizer on several ranks.

Read by tests/test_optimizer_state_sharding.py and its hidden twin. Every rank builds the same
model from the same state and computes gradients on the same whole batch (so the ranks'
gradients are equal, as after a DDP's synchronisation); the sharded optimizer then must train
exactly like the plain one. The ``optimizer_cls`` handed to the submission is a subclass of
AdamW or SGD defined here, whose instances (the submission's local optimizers) report which
parameters they hold and step, and which hold state. A local optimizer is an instance that
holds a parameter of the model or that steps: an instance made only to read the class's
``defaults`` (say ``optimizer_cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults``)
holds neither and is left out, while one that steps tensors that are not the model's counts
(and fails the check that the ranks split the parameters). Each rank returns its final state, the
names of the parameters its local optimizers own and hold state for, the number of local
optimizers it made (and of instances left out), and what the sharded optimizer's ``zero_grad`` left behind: after the last
step, the names of the parameters whose ``.grad`` survived ``zero_grad(set_to_none=True)``, and
after one more backward, those whose ``.grad`` is not all zeros after ``zero_grad(set_to_none=False)``.
"""

from __future__ import annotations

import torch

from . import parallel_models as models
from .ddp import optimizer_state_of, state_of
from .parallel_launch import launch, record

NAMES: dict[int, str] = {}
INSTANCES: list[torch.optim.Optimizer] = []
STEPPED: set[int] = set()  # id() of the instances whose step ran


def _names(optimizer: torch.optim.Optimizer, with_grad: bool = False) -> list[str]:
    return sorted(NAMES.get(id(p), "<a tensor that is not a parameter of the model>")
                  for group in optimizer.param_groups for p in group["params"] if not with_grad or p.grad is not None)


def _logged(base: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    class Logged(base):
        def __init__(self, params, *args, **kwargs):
            super().__init__(params, *args, **kwargs)
            INSTANCES.append(self)

        def step(self, closure=None):
            STEPPED.add(id(self))
            record("local_step", tuple(_names(self, with_grad=True)))
            return super().step(closure)

    Logged.__name__ = Logged.__qualname__ = f"Logged{base.__name__}"
    return Logged


def local_optimizers() -> list[torch.optim.Optimizer]:
    """The instances of ``optimizer_cls`` that hold a parameter of the model or that stepped (see the docstring)."""
    return [local for local in INSTANCES
            if id(local) in STEPPED or any(id(p) in NAMES for group in local.param_groups for p in group["params"])]


LOGGED = {"AdamW": _logged(torch.optim.AdamW), "SGD": _logged(torch.optim.SGD)}


def train_rank(adapters, *, rank: int, world_size: int, device: str, model: str, init_state: dict,
               inputs: torch.Tensor, targets: torch.Tensor, steps: int, optimizer: str, lr: float,
               groups: list[list[str]] | None = None, add_group_at: int | None = None, closure: bool = False,
               dtype: str | None = None) -> dict:
    """One rank's run (a job of ``parallel_launch``): the same whole batch on every rank.

    ``dtype`` ("float64", say): the model's parameters and buffers are cast to it before the
    initial state is loaded, and the floating inputs and targets are cast to it (as the DDP probe
    does); the states reported keep their dtype.

    ``closure``: each step is ``opt.step(closure)``, the closure clearing the gradients and
    running the forward and backward (as torch.optim's API allows); what each step returned is
    reported ("returned": the loss as a float, or the type's name when it is not a tensor), next
    to the losses the closure computed ("closure_losses").
    """
    net = models.build(model, make_lm=lambda: adapters.get_transformer_lm(model_overrides=models.LM_OVERRIDES))
    if dtype is not None:
        net.to(getattr(torch, dtype))
    net.load_state_dict(init_state)
    net.to(device)
    if dtype is not None:
        inputs = inputs.to(getattr(torch, dtype)) if inputs.is_floating_point() else inputs
        targets = targets.to(getattr(torch, dtype)) if targets.is_floating_point() else targets
    params = dict(net.named_parameters())
    NAMES.update({id(p): name for name, p in params.items()})
    options = {"lr": lr, **({"weight_decay": 0.1} if optimizer == "AdamW" else {})}
    first = list(params.values()) if groups is None else [params[n] for n in groups[0]]
    opt = adapters.get_sharded_optimizer(first, LOGGED[optimizer], **options)
    x, y = inputs.to(device), targets.to(device)
    returned: list = []
    closure_losses: list[float] = []
    for step in range(steps):
        if groups is not None and step == add_group_at:
            opt.add_param_group({"params": [params[n] for n in groups[1]], "lr": lr / 2})
        record("step", step)
        if closure:
            def compute_loss():
                opt.zero_grad(set_to_none=True)
                loss = models.loss_of(model, net(x), y)
                loss.backward()
                closure_losses.append(float(loss))
                return loss

            got = opt.step(compute_loss)
            returned.append(float(got) if isinstance(got, torch.Tensor) and got.numel() == 1 else type(got).__name__)
            continue
        opt.zero_grad(set_to_none=True)
        models.loss_of(model, net(x), y).backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    not_cleared = sorted(name for name, p in params.items() if p.grad is not None)
    models.loss_of(model, net(x), y).backward()
    opt.zero_grad(set_to_none=False)
    not_zeroed = sorted(name for name, p in params.items() if p.grad is not None and bool(p.grad.any()))
    local = local_optimizers()
    owned = sorted(name for optimizer in local for name in _names(optimizer))
    with_state = sorted(NAMES.get(id(p), "?") for optimizer in local for p, state in optimizer.state.items() if state)
    return {"final": state_of(net), "owned": owned, "with_state": with_state, "instances": len(local),
            "left_out": len(INSTANCES) - len(local), "optimizer_state": optimizer_state_of(local, NAMES),
            "zero_grad": {"set_to_none": not_cleared, "in_place": not_zeroed},
            "returned": returned, "closure_losses": closure_losses}


def train(load_adapters, world_size: int, settings: dict, timeout_s: float = 60.0, backend: str = "gloo") -> dict:
    """``train_rank(**settings)`` on ``world_size`` ranks ("nccl": one GPU each); see ``parallel_launch.launch``."""
    return launch(load_adapters, "optimizer_state_sharding.train_rank", world_size, settings, timeout_s=timeout_s, backend=backend)


PROBES = {"train": train}
