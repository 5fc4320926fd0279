"""Probes for the fsdp tests (§3.7): train a model with the submission's FSDP on several ranks.

Read by harness/fsdp_checks.py (``run_fsdp``). Every rank builds the model from the provided
model's classes of the submission's package (``cs336_systems.model``), starts from a different
state (rank 0's is the one sent), wraps it with ``get_fsdp`` and trains its own slice of the
batch. It returns the shards it holds (name, shape, dtype of each parameter of the wrapped
module), the dtype and shape of each gradient after the first step's synchronisation, the full
parameters (``fsdp_gather_full_params``) after every step, and its event log with these
markers: ("step", s), ("forward_begin", s), ("backward_begin", s), ("backward_end", s),
("synced", s), plus ("layer_begin"/"layer_end", name) and ("backward_reached", name) from the
``fsdp_chain`` model. Memory, as the CPU can see it: every tensor autograd saves during a
forward is noted (through ``saved_tensors_hooks``, weakly: the probe keeps nothing alive), and
at ("backward_begin", s) each one still alive is reported as ("saved", s, shape, dtype, bytes
its storage still holds): a full weight that was freed after its forward (its storage released)
shows 0 bytes; one kept shows its size.
"""

from __future__ import annotations

import inspect
import sys
import weakref

import torch

from . import parallel_models as models
from .ddp import make_optimizer
from .parallel_launch import launch, record


def describe_parameters(module: torch.nn.Module) -> dict[str, list]:
    return {name: [list(p.shape), str(p.dtype).removeprefix("torch.")] for name, p in module.named_parameters()}


def train_rank(adapters, *, rank: int, world_size: int, device: str, model: str, init_state: dict,
               inputs: torch.Tensor, targets: torch.Tensor, steps: int, optimizer: str, lr: float,
               compute_dtype: torch.dtype | None = None, keyword_input: bool = False) -> dict:
    """One rank's run (a job of ``parallel_launch``).

    ``keyword_input``: the wrapper is called with the input as a keyword argument named as the
    model's forward names it (``fsdp(tokens=inputs)`` for ``fsdp_chain``, ``fsdp(token_ids=...)``
    for the LM), as any ``nn.Module`` may be called.
    """
    import cs336_systems.model  # noqa: F401  the submission's provided model (loaded by parallel_launch)

    net = models.build(model, make_lm=lambda: adapters.get_transformer_lm(model_overrides=models.LM_OVERRIDES),
                       model_module=sys.modules["cs336_systems.model"])
    net.load_state_dict(models.perturbed(init_state, rank))
    net.to(device)
    per_rank = inputs.shape[0] // world_size
    x = inputs[rank * per_rank:(rank + 1) * per_rank].to(device)
    y = targets[rank * per_rank:(rank + 1) * per_rank].to(device)
    input_name = next(iter(inspect.signature(net.forward).parameters))
    fsdp = adapters.get_fsdp(net, compute_dtype=compute_dtype)
    record("wrapped")
    shards = describe_parameters(fsdp.module)
    opt = make_optimizer(optimizer, fsdp.parameters(), lr)
    grads, fulls = None, []
    for step in range(steps):
        record("step", step)
        opt.zero_grad(set_to_none=True)
        record("forward_begin", step)
        saved: list[weakref.ref] = []

        def note(tensor: torch.Tensor) -> torch.Tensor:
            try:
                saved.append(weakref.ref(tensor))
            except TypeError:
                pass
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(note, lambda tensor: tensor):
            loss = models.loss_of(model, fsdp(**{input_name: x}) if keyword_input else fsdp(x), y)
        for ref in saved:
            tensor = ref()
            if tensor is not None:
                record("saved", step, list(tensor.shape), str(tensor.dtype).removeprefix("torch."),
                       tensor.untyped_storage().nbytes())
        del saved
        record("backward_begin", step)
        loss.backward()
        record("backward_end", step)
        adapters.fsdp_on_after_backward(fsdp, opt)
        record("synced", step)
        if step == 0:
            grads = {name: None if p.grad is None else [list(p.grad.shape), str(p.grad.dtype).removeprefix("torch.")]
                     for name, p in fsdp.module.named_parameters()}
        opt.step()
        record("gather_full_params", step)
        fulls.append({name: t.detach().to("cpu").clone()  # in the dtype returned: the contract's float32
                      for name, t in adapters.fsdp_gather_full_params(fsdp).items()})
    return {"shards": shards, "grads": grads, "fulls": fulls}


def train(load_adapters, world_size: int, settings: dict, timeout_s: float = 60.0, backend: str = "gloo") -> dict:
    """``train_rank(**settings)`` on ``world_size`` ranks ("nccl": one GPU each); see ``parallel_launch.launch``."""
    return launch(load_adapters, "fsdp.train_rank", world_size, settings, timeout_s=timeout_s, backend=backend)


class DeepStack(torch.nn.Module):
    """x (rows, width) -> (rows, width) through ``layers`` of the provided model's ``Linear``: weights dwarf activations."""

    def __init__(self, model, width: int, layers: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(model.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def memory_rank(adapters, *, rank: int, world_size: int, device: str, width: int, layers: int, rows: int,
                seed: int = 0) -> dict:
    """One rank's GPU memory through FSDP of ``DeepStack`` (a job of ``parallel_launch``; CUDA only).

    Returns bytes: ``held``, allocated after wrapping (the unwrapped model gone);
    ``forward_peak`` and ``step_peak``, the highest allocation above the level at the start of
    the second step (SGD, compute dtype float32) during its forward, and during its forward,
    backward and ``fsdp_on_after_backward``. The first step warms up NCCL and the allocator.
    """
    import cs336_systems.model  # noqa: F401  the submission's provided model (loaded by parallel_launch)

    torch.manual_seed(seed)
    net = DeepStack(sys.modules["cs336_systems.model"], width, layers).to(device)
    generator = torch.Generator().manual_seed(seed + 1 + rank)
    x = torch.randn(rows, width, generator=generator).to(device)
    y = torch.randn(rows, width, generator=generator).to(device)
    fsdp = adapters.get_fsdp(net)
    del net
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated(device)
    opt = make_optimizer("SGD", fsdp.parameters(), 1e-3)
    peaks = {}
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        loss = torch.nn.functional.mse_loss(fsdp(x), y)
        torch.cuda.synchronize()
        peaks["forward_peak"] = torch.cuda.max_memory_allocated(device) - start
        loss.backward()
        adapters.fsdp_on_after_backward(fsdp, opt)
        torch.cuda.synchronize()
        peaks["step_peak"] = torch.cuda.max_memory_allocated(device) - start
        del loss
        opt.step()
    return {"held": held, **peaks}


def memory(load_adapters, world_size: int, settings: dict, timeout_s: float = 120.0) -> dict:
    """``memory_rank(**settings)`` on ``world_size`` ranks over NCCL, one GPU each; see ``parallel_launch.launch``."""
    return launch(load_adapters, "fsdp.memory_rank", world_size, settings, timeout_s=timeout_s, backend="nccl")


PROBES = {"train": train, "memory": memory}
