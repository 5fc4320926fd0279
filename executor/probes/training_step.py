"""Probe of the training_step tests (§3.8), and the rank job of the training-step board.

Read by harness/training_step.py (the visible and hidden tests) and by the board's ``run.py``,
which start ``world_size`` ranks through ``parallel_launch`` (gloo on the CPU, NCCL with one GPU
a rank; every collective is logged). Each rank runs :func:`run_rank`:

1. builds the provided Transformer LM, float32, seeded: the same initial weights on every rank
   and in the trusted single-process run. On the board it is the kit's own
   ``cs336_systems/model.py`` (never the submission's copy); in the executor, which holds no
   copy of the kit, the submission's ``cs336_systems.model``, which the harness's truth (built
   from the kit's) then judges: a changed model fails the ``different_model`` rule or the gate;
2. takes its rows of the global batch (rank r: rows r*b/n to (r+1)*b/n);
3. hands the model to ``adapters.get_training_step(model, optimizer_settings, compute_dtype)``,
   which returns an object with ``step(inputs, targets) -> loss`` and ``full_parameters()``;
4. runs ``gate_steps`` steps, marking each with ("step", s) in the event log, and reports the
   losses and the parameters as the gate compares them (:func:`compared`: whole, or on the
   official config a fixed sample of each tensor's elements);
5. calls the step again, marking each call with ("timed_call", i): on CUDA, warm-up for
   ``warmup_ms`` then measurement for ``rep_ms`` with CUDA events around each call, as
   ``triton.testing.do_bench`` does, the call counts fixed by rank 0's estimate and shared with
   every rank (both ranks must make the same collectives); on the CPU, ``warmup_calls`` untimed
   calls, then ``rep_calls`` calls each timed with ``time.perf_counter``; then it reports the
   compared parameters again, and on CUDA the peak memory allocated from the model's hand-over to
   the end of the timing (``torch.cuda.max_memory_allocated``; the model's own weights included).

The step is timed here, never by the submission. What comes back is data; every verdict is
made in the harness.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import statistics
import time
import zlib
from pathlib import Path

import torch

from .parallel_launch import launch, record

KIT = Path(__file__).resolve().parents[2]


@functools.cache
def kit_model_module():
    """The kit's provided model (cs336_systems/model.py), imported under a private name; in the
    executor, where this file is a copy without the kit around it, the submission's."""
    if not (KIT / "cs336_systems" / "model.py").is_file():
        return importlib.import_module("cs336_systems.model")
    spec = importlib.util.spec_from_file_location("cs336_kit_model", KIT / "cs336_systems" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model(config: dict, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The provided TransformerLM of ``config`` (a step config's dict), float32, seeded with ``config["seed"]``."""
    torch.manual_seed(config["seed"])
    return kit_model_module().TransformerLM(
        vocab_size=config["vocab_size"], context_length=config["context_length"], d_model=config["d_model"],
        num_layers=config["num_layers"], num_heads=config["num_heads"], d_ff=config["d_ff"], device=device)


def global_batch(config: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets): token ids of shape (batch_size, context_length), the targets shifted by one."""
    generator = torch.Generator().manual_seed(config["seed"] + 1)
    tokens = torch.randint(0, config["vocab_size"], (config["batch_size"], config["context_length"] + 1),
                           generator=generator)  # (batch, seq + 1)
    return tokens[:, :-1], tokens[:, 1:]


def compared_indices(name: str, numel: int, config: dict) -> torch.Tensor | None:
    """The flat indices of parameter ``name``'s elements that the gate compares; None: every element.

    The rule: with ``config["compared_elements"]`` None, or a tensor of at most that many
    elements, every element; otherwise that many indices drawn uniformly (with replacement, then
    sorted and deduplicated, so a few fewer) by a generator seeded with ``config["seed"]`` and the
    CRC-32 of ``name``. The same on every rank, in the trusted run and in every run of the config;
    it spreads over all rows and columns, which a strided sample of a (rows, 4096) weight would not.
    """
    wanted = config.get("compared_elements")
    if wanted is None or numel <= wanted:
        return None
    generator = torch.Generator().manual_seed(config["seed"] * 1_000_003 + zlib.crc32(name.encode()))
    return torch.randint(0, numel, (wanted,), generator=generator).unique()  # (<= wanted,), sorted


def compared(name: str, tensor: torch.Tensor, config: dict) -> torch.Tensor:
    """What the gate compares of parameter ``name``: float32 on the CPU, the whole tensor (its shape
    kept) or, where :func:`compared_indices` samples, the 1-D sample of its flattened elements."""
    indices = compared_indices(name, tensor.numel(), config)
    if indices is None:
        return tensor.detach().float().cpu().clone()
    return tensor.detach().reshape(-1)[indices.to(tensor.device)].float().cpu()  # (<= compared_elements,)


def _time_cpu(step, config: dict) -> list[float]:
    for _ in range(config["warmup_calls"]):
        step()
    times = []
    for i in range(config["rep_calls"]):
        record("timed_call", i)
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    record("timing_done")
    return times


def _time_cuda(step, config: dict, device) -> list[float]:
    import torch.distributed as dist

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    step()  # do_bench's estimate: one call, timed
    torch.cuda.synchronize(device)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize(device)
    estimate = torch.tensor([max(start.elapsed_time(end), 1e-3)], device=device)
    dist.broadcast(estimate, src=0)  # every rank makes the same number of calls
    warmup = max(1, int(config["warmup_ms"] / estimate.item()))
    rep = max(1, int(config["rep_ms"] / estimate.item()))
    for _ in range(warmup):
        step()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        record("timed_call", i)
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize(device)
    record("timing_done")
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def run_rank(adapters, *, rank: int, world_size: int, device: str, config: dict) -> dict:
    """One rank's run (a job of parallel_launch); returns losses, full parameters and call times."""
    model = build_model(config, device)
    inputs, targets = global_batch(config)
    rows = config["batch_size"] // world_size
    x = inputs[rank * rows:(rank + 1) * rows].to(device)  # (rows, seq)
    y = targets[rank * rows:(rank + 1) * rows].to(device)  # (rows, seq)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    trainer = adapters.get_training_step(model, dict(config["optimizer"]), getattr(torch, config["compute_dtype"]))
    losses = []
    for s in range(config["gate_steps"]):
        record("step", s)
        losses.append(float(trainer.step(x, y)))
    record("gate_done")
    params = {name: compared(name, value, config) for name, value in trainer.full_parameters().items()}
    timed = functools.partial(trainer.step, x, y)
    times = _time_cuda(timed, config, device) if cuda else _time_cpu(timed, config)
    peak = torch.cuda.max_memory_allocated(device) if cuda else None  # the gate's and the timing's peak
    after = {name: compared(name, value, config) for name, value in trainer.full_parameters().items()}
    return {"losses": losses, "params": params, "times_ms": times, "median_ms": statistics.median(times),
            "params_after_timing": after, "peak_bytes": peak}


def train(load_adapters, config: dict, backend: str = "gloo") -> dict:
    """``run_rank`` on ``config["world_size"]`` ranks, killed after ``config["time_limit_s"]``; see ``launch``."""
    return launch(load_adapters, "training_step.run_rank", config["world_size"], {"config": config},
                  backend=backend, timeout_s=config["time_limit_s"])


PROBES = {"train": train}
