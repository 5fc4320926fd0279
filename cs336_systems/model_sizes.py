"""The five model sizes of the assignment, as one table (provided: read it, don't rewrite it).

| size   | d_model | d_ff   | num_layers | num_heads | parameters |
| ------ | ------- | ------ | ---------- | --------- | ---------- |
| small  | 768     | 3072   | 12         | 12        | 128.6M     |
| medium | 1024    | 4096   | 24         | 16        | 423.2M     |
| large  | 1280    | 5120   | 36         | 20        | 969.4M     |
| xl     | 1600    | 6400   | 48         | 25        | 1998.2M    |
| 2.7B   | 2560    | 10240  | 32         | 32        | 3406.8M    |

Every size uses a vocabulary of 10,000 tokens; benchmarks use batch size 4. The names are the
assignment's; the parameter counts are this model's (SwiGLU has three d_ff matrices per layer,
and the embedding and the LM head are not tied), counted on the ``meta`` device. Build a model with
:func:`build_model`; ``overrides`` shrinks it for quick runs on a laptop CPU, for example
``build_model("small", overrides={"num_layers": 1, "d_model": 64, "d_ff": 128, "num_heads": 2})``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from cs336_systems.model import AttentionFn, TransformerLM

VOCAB_SIZE = 10_000
BATCH_SIZE = 4
MAX_CONTEXT_LENGTH = 1024
"""The longest sequence a model built here takes (the assignment uses 128 to 1024)."""


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """One row of the size table: the hyperparameters of a TransformerLM."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = VOCAB_SIZE
    context_length: int = MAX_CONTEXT_LENGTH
    rope_theta: float = 10_000.0

    def __post_init__(self):
        if self.d_model % self.num_heads != 0 or (self.d_model // self.num_heads) % 2 != 0:
            raise ValueError(
                f"model size {self.name!r}: d_model ({self.d_model}) must be num_heads ({self.num_heads}) "
                "times an even head dimension (RoPE rotates pairs of dimensions)"
            )


MODEL_SIZES: dict[str, ModelSize] = {
    size.name: size
    for size in (
        ModelSize("small", d_model=768, d_ff=3072, num_layers=12, num_heads=12),
        ModelSize("medium", d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
        ModelSize("large", d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
        ModelSize("xl", d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
        ModelSize("2.7B", d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
    )
}

_OVERRIDABLE = tuple(field.name for field in dataclasses.fields(ModelSize) if field.name != "name")


def get_model_size(name: str, overrides: Mapping[str, int | float] | None = None) -> ModelSize:
    """The row of the table called ``name``, with ``overrides`` replacing some of its fields.

    Raises ValueError for an unknown name (listing the valid ones), for an unknown override field
    (listing the valid fields), and for a non-positive override.
    """
    if name not in MODEL_SIZES:
        raise ValueError(f"unknown model size {name!r}; choose one of {', '.join(MODEL_SIZES)}")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(_OVERRIDABLE))
    if unknown:
        raise ValueError(f"unknown model override(s) {', '.join(unknown)}; valid fields: {', '.join(_OVERRIDABLE)}")
    bad = {key: value for key, value in overrides.items() if not value > 0}
    if bad:
        raise ValueError(f"model overrides must be positive; got {bad}")
    return dataclasses.replace(MODEL_SIZES[name], **overrides)


def build_model(
    size: str | ModelSize,
    *,
    overrides: Mapping[str, int | float] | None = None,
    attention_fn: AttentionFn | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> TransformerLM:
    """Build a TransformerLM of ``size`` (a name from MODEL_SIZES, or a ModelSize) on ``device``.

    ``overrides`` replaces fields of a named size (see :func:`get_model_size`); ``attention_fn``
    swaps the attention function (see ``cs336_systems.model``). Parameters are created directly on
    ``device`` (``"meta"`` gives a model without memory, handy for counting parameters).
    """
    if isinstance(size, str):
        size = get_model_size(size, overrides)
    elif overrides:
        size = dataclasses.replace(size, **overrides)
    return TransformerLM(
        vocab_size=size.vocab_size,
        context_length=size.context_length,
        d_model=size.d_model,
        num_layers=size.num_layers,
        num_heads=size.num_heads,
        d_ff=size.d_ff,
        rope_theta=size.rope_theta,
        attention_fn=attention_fn,
        device=device,
        dtype=dtype,
    )
