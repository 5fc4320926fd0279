"""§2.6 flash_benchmarking: your Triton FlashAttention-2 against plain PyTorch attention.

Reference solution.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from cs336_systems import benchmarking_script
from cs336_systems import model as lm

PHASES = ("forward", "backward", "forward_backward")
"""The three timings of every implementation, as the middle part of the row keys."""


def _pytorch_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Plain attention with FlashAttention's calling convention: (batch, n, d) tensors, top-left causal mask."""
    mask = None
    if is_causal:
        queries = torch.arange(Q.shape[-2], device=Q.device)  # (n_queries,)
        keys = torch.arange(K.shape[-2], device=K.device)  # (n_keys,)
        mask = queries[:, None] >= keys[None, :]  # (n_queries, n_keys)
    return lm.scaled_dot_product_attention(Q, K, V, mask)


def flash_benchmark_sweep(
    *,
    seq_lens: Sequence[int],
    head_dims: Sequence[int],
    dtypes: Sequence[torch.dtype],
    device: str | torch.device,
    batch_size: int = 1,
    is_causal: bool = True,
    implementations: Mapping[str, Callable[..., torch.Tensor]] | None = None,
    bench: Callable[[Callable[[], Any]], float] | None = None,
) -> list[dict[str, Any]]:
    """Time forward, backward and forward+backward of each implementation over seq_lens × head_dims × dtypes."""
    device = torch.device(device)
    if implementations is None:
        from cs336_systems.flash_attention_triton import FlashAttentionTriton

        implementations = {"triton": FlashAttentionTriton.apply, "pytorch": _pytorch_attention}
    if bench is None:
        bench = _do_bench_ms if device.type == "cuda" else _wall_clock_ms

    rows = []
    for seq_len in seq_lens:
        for head_dim in head_dims:
            for dtype in dtypes:
                row: dict[str, Any] = {
                    "seq_len": seq_len,
                    "head_dim": head_dim,
                    "dtype": str(dtype).removeprefix("torch."),
                    "batch_size": batch_size,
                    "is_causal": is_causal,
                }
                row.update({f"{name}_{phase}_ms": None for name in implementations for phase in PHASES})
                row["oom"] = []
                inputs = None
                try:
                    inputs = [
                        torch.randn(batch_size, seq_len, head_dim, device=device, dtype=dtype, requires_grad=True)
                        for _ in range(3)
                    ]  # Q, K, V: (batch, seq, head_dim) each
                    dO = torch.randn(batch_size, seq_len, head_dim, device=device, dtype=dtype)  # (batch, seq, d)
                except torch.cuda.OutOfMemoryError:
                    row["oom"] = list(implementations)
                for name, attention in implementations.items():
                    if inputs is None:
                        break
                    try:
                        _bench_one(row, name, attention, inputs, dO, is_causal, bench)
                    except torch.cuda.OutOfMemoryError:
                        row["oom"].append(name)
                    finally:
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                rows.append(row)
                inputs = dO = None
    return rows


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _bench_one(row, name, attention, inputs, dO, is_causal, bench) -> None:
    Q, K, V = inputs

    def forward() -> torch.Tensor:
        return attention(Q, K, V, is_causal)  # (batch, seq, head_dim)

    row[f"{name}_forward_ms"] = bench(forward)
    O = forward()
    row[f"{name}_backward_ms"] = bench(lambda: torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True))
    del O
    row[f"{name}_forward_backward_ms"] = bench(lambda: torch.autograd.grad(forward(), (Q, K, V), dO))


def _do_bench_ms(fn: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, return_mode="median"))


def _wall_clock_ms(fn: Callable[[], Any]) -> float:
    times = benchmarking_script.time_steps(fn, warmup_steps=1, measure_steps=3, synchronize=lambda: None)
    return 1e3 * statistics.median(times)
