"""Probe for §3.4's GPU test: profile one DDP training step over NCCL and return its GPU kernel timeline.

Read by harness/ddp_checks.py (``check_overlap_in_gpu_profile``), which judges whether the all-reduces ran
while the backward's kernels were still running. Each rank (one GPU) wraps a stack of wide
Linear layers with the submission's ``get_ddp``, trains one step to warm up (NCCL connects,
kernels load), then trains one more under ``torch.profiler`` with CUDA activity on, the
backward inside a ``record_function`` range. From the profiler's trace it returns each GPU
kernel of that step as ``(kind, start_us, end_us)``:

- ``"nccl"``: a NCCL kernel (the all-reduces);
- ``"backward"``: any other kernel whose launch call was made while ``loss.backward()`` ran
  (on whatever thread: autograd runs CUDA backwards on its own);
- ``"other"``: the rest (forward, the work after the backward).

GPU and CPU times share one clock in the trace; only GPU times are returned.
"""

from __future__ import annotations

import json
import os
import tempfile

import torch
from torch import nn

from .parallel_launch import launch

BACKWARD_RANGE = "cs336_profiled_backward"
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def wide_stack(width: int, layers: int) -> nn.Module:
    """``layers`` bias-free ``width`` x ``width`` Linear layers with tanh between: a backward of many big gradients."""
    blocks: list[nn.Module] = []
    for i in range(layers):
        blocks.append(nn.Linear(width, width, bias=False))
        if i < layers - 1:
            blocks.append(nn.Tanh())
    return nn.Sequential(*blocks)


def kernel_timeline(trace: dict) -> list[tuple[str, float, float]]:
    """[(kind, start_us, end_us)] of a chrome trace's GPU kernels, sorted by start; kinds as in the module doc."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") == "user_annotation" and e.get("name") == BACKWARD_RANGE]
    launched_at = {e["args"]["correlation"]: e["ts"] for e in events
                   if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})}
    timeline = []
    for event in events:
        if event.get("cat") != "kernel":
            continue
        start, end = float(event["ts"]), float(event["ts"] + event["dur"])
        launch_ts = launched_at.get(event.get("args", {}).get("correlation"))
        if "nccl" in event.get("name", "").lower():
            kind = "nccl"
        elif launch_ts is not None and any(lo <= launch_ts <= hi for lo, hi in windows):
            kind = "backward"
        else:
            kind = "other"
        timeline.append((kind, start, end))
    return sorted(timeline, key=lambda item: item[1])


def profile_rank(adapters, *, rank: int, world_size: int, device: str, width: int, layers: int, rows: int,
                 seed: int = 0) -> dict:
    """One rank's profiled step (a job of ``parallel_launch``): ``{"kernels": kernel_timeline(...)}``."""
    torch.manual_seed(seed)
    net = wide_stack(width, layers).to(device)
    generator = torch.Generator().manual_seed(seed + 1 + rank)
    x = torch.randn(rows, width, generator=generator).to(device)
    y = torch.randn(rows, width, generator=generator).to(device)
    ddp = adapters.get_ddp(net)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    def step(profiled: bool) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        if profiled:
            with torch.profiler.record_function(BACKWARD_RANGE):
                loss.backward()
        else:
            loss.backward()
        adapters.ddp_on_after_backward(ddp, optimizer)
        torch.cuda.synchronize()

    step(profiled=False)  # warm-up: NCCL's connections, kernel loading, the allocator's pools
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        step(profiled=True)
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        profiler.export_chrome_trace(path)
        with open(path) as file:
            trace = json.load(file)
    finally:
        os.unlink(path)
    return {"kernels": kernel_timeline(trace)}


def profile(load_adapters, world_size: int, settings: dict, timeout_s: float = 120.0) -> dict:
    """``profile_rank(**settings)`` on ``world_size`` ranks over NCCL, one GPU each; see ``parallel_launch.launch``."""
    return launch(load_adapters, "ddp_profile.profile_rank", world_size, settings, timeout_s=timeout_s,
                  backend="nccl")


PROBES = {"profile": profile}
