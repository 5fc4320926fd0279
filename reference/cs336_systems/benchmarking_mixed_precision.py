"""§1.5 benchmarking_mixed_precision: what autocast does to each dtype, and what it buys in time.

Reference solution. Under ``torch.autocast``, parameters stay float32; matrix multiplies
(``fc1``, ``fc2``) cast their inputs to the low-precision dtype and return it; ops that lose
accuracy in low precision run in float32 (the cross-entropy's log-sum-exp everywhere;
LayerNorm on CUDA, while CPU autocast leaves it in the input's dtype); gradients take the dtype
of the parameters they belong to.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from cs336_systems import benchmarking_script, model_sizes

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
    """Dtypes seen in one forward (under autocast to ``dtype``) and backward of ``ToyModel(8, 4)``."""
    device = torch.device(device)
    torch.manual_seed(0)
    model = ToyModel(8, 4).to(device)
    inputs = torch.randn(2, 8, device=device)  # (batch, in_features)
    targets = torch.randint(0, 4, (2,), device=device)  # (batch,)
    seen: dict[str, torch.dtype] = {}

    def recorder(key: str):
        def hook(module, inputs, output) -> None:  # returns None: the output is left as it is
            seen.setdefault(key, output.dtype)

        return hook

    hooks = [model.fc1.register_forward_hook(recorder("fc1_output")),
             model.ln.register_forward_hook(recorder("layer_norm_output"))]
    try:
        with torch.autocast(device.type, dtype=dtype):
            seen["parameters"] = next(model.parameters()).dtype
            logits = model(inputs)  # (batch, out_features)
            loss = F.cross_entropy(logits, targets)
        seen["logits"], seen["loss"] = logits.dtype, loss.dtype
        loss.backward()
        seen["gradients"] = model.fc1.weight.grad.dtype
    finally:
        for hook in hooks:
            hook.remove()
    return {key: str(seen[key]).removeprefix("torch.") for key in DTYPE_KEYS}


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
    """``benchmark_model`` in full precision, then under bf16 autocast: [fp32 result, bf16 result]."""
    return [
        benchmarking_script.benchmark_model(
            model_size, context_length=context_length, mode=mode, warmup_steps=warmup_steps,
            measure_steps=measure_steps, device=device, use_bf16=use_bf16, batch_size=batch_size,
            model_overrides=model_overrides)
        for use_bf16 in (False, True)
    ]
