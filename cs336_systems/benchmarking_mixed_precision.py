"""§1.5 benchmarking_mixed_precision: what autocast does to each dtype, and what it buys in time.

You write ``autocast_dtypes`` and ``compare_precisions`` (see handout/README.md, §1.5).
``ToyModel`` is provided.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from cs336_systems import model_sizes
from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.5 benchmarking_mixed_precision"

class ToyModel(nn.Module):
    """CS336's toy model for autocast: Linear -> ReLU -> LayerNorm -> Linear (provided; do not edit)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(x))  # (batch, 10)
        x = self.ln(x)  # (batch, 10)
        return self.fc2(x)  # (batch, out_features)


DTYPE_KEYS = ("parameters", "fc1_output", "layer_norm_output", "logits", "loss", "gradients")
"""What :func:`autocast_dtypes` reports, in order."""


def autocast_dtypes(dtype: torch.dtype, device: str | torch.device = "cpu") -> dict[str, str]:
    """The dtypes of one training step of ``ToyModel(8, 4)`` with the forward under autocast to ``dtype``.

    Build ``ToyModel(8, 4)`` on ``device`` (float32), draw inputs of shape (2, 8) and integer
    targets in [0, 4), then inside ``torch.autocast(device.type, dtype=dtype)`` run the forward
    and ``torch.nn.functional.cross_entropy(logits, targets)``; run ``loss.backward()`` outside
    it. Record (forward hooks on ``fc1`` and ``ln`` see their outputs):

    * ``parameters``: a parameter's dtype, read inside the autocast region;
    * ``fc1_output``, ``layer_norm_output``: the outputs of ``model.fc1`` and ``model.ln``;
    * ``logits``, ``loss``: the model's output and the loss;
    * ``gradients``: ``model.fc1.weight.grad``'s dtype after the backward.

    Returns:
        ``{key: dtype name}`` for every key of ``DTYPE_KEYS``, names without ``torch.``
        (``"float32"``, ``"bfloat16"``, ``"float16"``).
    """
    raise not_implemented(__file__, "autocast_dtypes", _SECTION)


def compare_precisions(
    model_size: str,
    *,
    context_length: int,
    mode: str,
    warmup_steps: int,
    measure_steps: int,
    device: str | torch.device,
    batch_size: int = model_sizes.BATCH_SIZE,
    model_overrides: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Time ``mode`` steps of one model size in full precision and under bf16 autocast.

    Call §1.1's ``benchmarking_script.benchmark_model`` twice with the arguments given (look it
    up at call time), first with ``use_bf16=False``, then with ``use_bf16=True``.

    Returns:
        ``[full-precision result, bf16 result]``: the two dicts ``benchmark_model`` returned.
    """
    raise not_implemented(__file__, "compare_precisions", _SECTION)
