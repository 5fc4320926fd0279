"""The models that part 2's tests train, built the same way next to the submission and in the harness.

Read by the data-parallel probes (which train them with the submission's wrappers on every
rank) and by the tests (which train the same models in one process, as the truth to compare
with). Each model is small, and each has a trap a data-parallel wrapper must handle:

- ``frozen``: a frozen bias and a frozen extra tensor (no gradient, no hook allowed), a
  trainable parameter the forward never uses (its gradient stays None), and a buffer the
  forward uses (rank 0's value must reach every rank);
- ``tied``: one weight used by two layers (it must be reduced once, not twice);
- ``chain``: five linear layers of distinct sizes, with markers that log when the backward
  reaches each layer (``("backward_reached", i)``), to judge whether communication overlaps it;
- ``frozen_chain``: ``chain`` with layer 2's weight frozen (the backward still passes through
  it): a wrapper must leave that weight out of its hooks, its buckets and its all-reduces;
- ``lm``: the provided Transformer LM, tiny (built by the caller: ``adapters.get_transformer_lm``
  next to the submission, ``cs336_systems.model_sizes.build_model`` in the harness);
- ``fsdp_chain``: an embedding, RMSNorm and four Linear layers of the provided model's classes
  (passed in), whose forward logs ``("layer_begin", name)`` and ``("layer_end", name)`` around
  each layer, plus backward markers.

Every parameter of ``chain`` and ``fsdp_chain`` has a distinct number of elements, so that a
logged collective of n elements names the parameter (or the set of parameters) it carries.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .parallel_launch import record

LM_OVERRIDES = {"d_model": 16, "d_ff": 24, "num_layers": 2, "num_heads": 2, "vocab_size": 50, "context_length": 16}
"""The provided LM, shrunk to milliseconds a step (``model_overrides`` of ``get_transformer_lm``)."""

CHAIN_WIDTHS = (10, 12, 14, 9, 11, 5)


class _Marker(torch.autograd.Function):
    """Identity; its backward logs ("backward_reached", label) when the gradient gets there."""

    @staticmethod
    def forward(ctx, x, label):
        ctx.label = label
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        record("backward_reached", ctx.label)
        return grad, None


def mark(x: torch.Tensor, label) -> torch.Tensor:
    return _Marker.apply(x, label) if x.requires_grad else x


class Frozen(nn.Module):
    """x (batch, 10) -> (batch, 5)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 16, bias=False)
        self.fc2 = nn.Linear(16, 24)
        self.fc2.bias.requires_grad_(False)
        self.fc3 = nn.Linear(24, 5, bias=False)
        self.unused = nn.Parameter(torch.randn(7))  # never used: its gradient stays None
        self.frozen_extra = nn.Parameter(torch.randn(3), requires_grad=False)
        self.register_buffer("scale", torch.rand(24) + 0.5)  # used by the forward

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x)) * self.scale
        return self.fc3(x)


class Tied(nn.Module):
    """x (batch, 10) -> (batch, 5); fc4 uses fc2's weight."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10, bias=False)
        self.fc2 = nn.Linear(10, 30, bias=False)
        self.fc3 = nn.Linear(30, 10, bias=False)
        self.fc4 = nn.Linear(10, 30, bias=False)
        self.fc4.weight = self.fc2.weight
        self.fc5 = nn.Linear(30, 5, bias=False)

    def forward(self, x):
        for layer in (self.fc1, self.fc2, self.fc3, self.fc4):
            x = torch.relu(layer(x))
        return self.fc5(x)


class Chain(nn.Module):
    """x (batch, 10) -> (batch, 5) through five bias-free layers; layer i's weight has a distinct size."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(CHAIN_WIDTHS, CHAIN_WIDTHS[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = mark(layer(x), i)
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return x


class FrozenChain(Chain):
    """``Chain`` whose layer 2 weight (126 elements) is frozen: no gradient, so no hook, no bucket, no all-reduce."""

    FROZEN_LAYER = 2

    def __init__(self):
        super().__init__()
        self.layers[self.FROZEN_LAYER].weight.requires_grad_(False)


class FSDPChain(nn.Module):
    """token ids (batch, seq) -> logits (batch, seq, 37): embedding, norm, four Linear layers of ``model``'s classes."""

    VOCAB = 37

    def __init__(self, model: Any):
        super().__init__()
        # Weights of 296, 128, 640, 960 and 888 elements: even padded to whole rows of 2 or 3
        # ranks, a gathered size names its layer (see ``fsdp_layer_of``).
        self.embed = model.Embedding(self.VOCAB, 8)
        self.norm = model.RMSNorm(8)
        self.up = model.Linear(8, 16)
        self.mid = model.Linear(16, 40)
        self.down = model.Linear(40, 24)
        self.head = model.Linear(24, self.VOCAB)

    def forward(self, tokens):
        x = tokens
        for name in ("embed", "norm", "up", "mid", "down", "head"):
            record("layer_begin", name)
            x = getattr(self, name)(x)
            record("layer_end", name)
            x = mark(x, name)
            if name in ("up", "mid"):
                x = torch.relu(x)
        return x


FSDP_LAYERS = ("embed", "up", "mid", "down", "head")
"""The sharded layers of ``FSDPChain``, in the order its forward uses them."""

FSDP_SHAPES = {"embed": (37, 8), "up": (16, 8), "mid": (40, 16), "down": (24, 40), "head": (37, 24)}


def fsdp_layer_of(numel: int) -> str | None:
    """The sharded layer of ``FSDPChain`` whose full weight, padded for 2 or 3 ranks, has ``numel`` elements."""
    for name, (rows, cols) in FSDP_SHAPES.items():
        if rows * cols <= numel <= (rows + 2) * cols:  # padding: at most two rows' worth
            return name
    return None

TOY_MODELS = {"frozen": Frozen, "tied": Tied, "chain": Chain, "frozen_chain": FrozenChain}


def build(name: str, make_lm=None, model_module: Any = None, seed: int = 0) -> nn.Module:
    """Model ``name`` with seeded initial values; ``make_lm()`` builds "lm", ``model_module`` holds the layers of "fsdp_chain"."""
    torch.manual_seed(seed)
    if name == "lm":
        return make_lm()
    if name == "fsdp_chain":
        return FSDPChain(model_module)
    return TOY_MODELS[name]()


def perturbed(state: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """``state`` for rank 0; a different one (noise added to every float tensor) for the other ranks."""
    if rank == 0:
        return {k: v.clone() for k, v in state.items()}
    generator = torch.Generator().manual_seed(1000 + rank)
    return {k: v + torch.randn(v.shape, generator=generator, dtype=v.dtype) if v.is_floating_point() else v.clone()
            for k, v in state.items()}


def loss_of(name: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss each model trains on: cross-entropy for the language models, mean squared error otherwise."""
    if name in ("lm", "fsdp_chain"):
        return torch.nn.functional.cross_entropy(output.flatten(0, -2).float(), target.flatten())
    return torch.nn.functional.mse_loss(output, target)
