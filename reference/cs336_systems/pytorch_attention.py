"""§2.1 pytorch_attention: how attention's time and memory grow with sequence length.

Reference solution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from cs336_systems import benchmarking_script
from cs336_systems import model as lm


def attention_sweep(
    *,
    batch_size: int = 8,
    head_dims: Sequence[int] = (16, 32, 64, 128),
    seq_lens: Sequence[int] = (256, 1024, 4096, 8192, 16384),
    device: str | torch.device = "cuda",
    warmup_steps: int = 5,
    measure_steps: int = 100,
    compiled: bool = False,
    attention_fn: Callable[..., torch.Tensor] | None = None,
) -> list[dict[str, Any]]:
    """Time single-head attention forward and backward over head_dims × seq_lens; one row each."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size}")
    device = torch.device(device)
    attention = attention_fn if attention_fn is not None else lm.scaled_dot_product_attention
    if compiled:
        attention = torch.compile(attention)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed_ms(step: Callable[[], Any]) -> float:
        times = benchmarking_script.time_steps(
            step, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=synchronize
        )
        return 1e3 * sum(times) / len(times)

    rows = []
    for head_dim in head_dims:
        for seq_len in seq_lens:
            row = {
                "batch_size": batch_size,
                "head_dim": head_dim,
                "seq_len": seq_len,
                "compiled": compiled,
                "forward_ms": None,
                "backward_ms": None,
                "memory_before_backward_bytes": None,
                "oom": False,
            }
            try:
                Q, K, V = (
                    torch.randn(batch_size, seq_len, head_dim, device=device, requires_grad=True)  # (b, n, d)
                    for _ in range(3)
                )
                row["forward_ms"] = timed_ms(lambda: attention(Q, K, V))
                O = attention(Q, K, V)  # (batch, seq, head_dim)
                dO = torch.randn_like(O)  # (batch, seq, head_dim)
                synchronize()
                if device.type == "cuda":
                    row["memory_before_backward_bytes"] = torch.cuda.memory_allocated(device)
                row["backward_ms"] = timed_ms(lambda: torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True))
            except torch.cuda.OutOfMemoryError:
                row["oom"] = True
            finally:
                Q = K = V = O = dO = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
    return rows
