"""Time a training step of each part-2 wrapper on the provided model, with the share spent communicating.

Staff script (the writeups of §3.3 to §3.7 ask students for these numbers; this gives the
reference's). It starts one process a GPU (NCCL) or a few CPU processes (gloo), builds the
provided Transformer LM of one size on every rank, and times AdamW training steps of:

    single      the model alone on each rank, no communication: the compute-only baseline
    naive       §3.2: one all-reduce per gradient after the backward
    flat        §3.3: one all-reduce of every gradient flattened
    individual  §3.4: per-gradient async all-reduces launched from the backward's hooks
    bucketed    §3.5: async all-reduces of buckets of --bucket-mb MB
    fsdp        §3.7: sharded weights gathered ahead of use, gradients reduce-scattered

Communication is reported as the time a step spends beyond the compute-only baseline
("exposed": what overlapping hides does not count), so the columns read directly as "how much
does data parallelism cost per step". Every rank trains its own batch of --batch-size rows; a
step is zero_grad, forward, cross-entropy, backward, the wrapper's sync, optimizer.step, then
``torch.cuda.synchronize()`` inside the timed region; the slowest rank's mean is reported.

Two GPUs (what gpu_checks/run.sh's ``parallel-bench`` step runs)::

    python benchmarks/parallel_training_benchmark.py --model-size small --world-size 2

A CPU smoke run (gloo, a shrunken model; about 15 s on 2 cores)::

    python benchmarks/parallel_training_benchmark.py --tiny
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WRAPPERS = ("single", "naive", "flat", "individual", "bucketed", "fsdp")
TINY_OVERRIDES = {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 2}
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Multicast off in every process (the parent sets these before the ranks start; they inherit them)."""


def _gpus():
    """The kit's GPU query (harness/gpus.py)."""
    sys.path.insert(0, str(ROOT))
    from harness import gpus

    return gpus


def _wrap(adapters, name: str, model: torch.nn.Module, bucket_mb: float):
    """(module to call, sync after backward(module, optimizer), at step start(module, optimizer))."""
    nothing = lambda wrapped, opt: None  # noqa: E731
    if name == "single":
        return model, nothing, nothing
    if name == "naive":
        adapters.run_naive_ddp_broadcast_parameters(model)
        return model, lambda wrapped, opt: adapters.run_naive_ddp_all_reduce_gradients(model), nothing
    if name == "flat":
        adapters.run_naive_ddp_broadcast_parameters(model)
        return model, lambda wrapped, opt: adapters.run_ddp_flat_all_reduce_gradients(model), nothing
    if name == "individual":
        return adapters.get_ddp(model), adapters.ddp_on_after_backward, nothing
    if name == "bucketed":
        return (adapters.get_ddp_bucketed(model, bucket_mb), adapters.ddp_bucketed_on_after_backward,
                adapters.ddp_bucketed_on_train_batch_start)
    if name == "fsdp":
        return adapters.get_fsdp(model), adapters.fsdp_on_after_backward, nothing
    raise ValueError(f"unknown wrapper {name!r}; choose from {WRAPPERS}")


def _time_wrapper(adapters, name: str, args, device: torch.device, rank: int) -> dict:
    import torch.distributed as dist
    import torch.nn.functional as F

    from cs336_systems import model_sizes

    torch.manual_seed(0)
    overrides = TINY_OVERRIDES if args.tiny else None
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = model_sizes.build_model(args.model_size, overrides=overrides, device=device)
    vocab = model_sizes.get_model_size(args.model_size, overrides).vocab_size
    wrapped, after_backward, at_start = _wrap(adapters, name, model, args.bucket_mb)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    generator = torch.Generator(device="cpu").manual_seed(1 + rank)
    tokens = torch.randint(0, vocab, (args.batch_size, args.context_length + 1), generator=generator).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (batch, seq) each

    def step() -> None:
        at_start(wrapped, optimizer)
        optimizer.zero_grad(set_to_none=True)
        logits = wrapped(inputs)  # (batch, seq, vocab)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        after_backward(wrapped, optimizer)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup_steps):
        step()
    dist.barrier()
    times = []
    for _ in range(args.measure_steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del wrapped, model, optimizer
    return {"wrapper": name, "mean_s": statistics.fmean(times), "peak_bytes": peak}


def rank_job(adapters, *, rank: int, world_size: int, device: str, args) -> list[dict]:
    """One rank's part, run by the kit's part-2 launcher (executor/probes/parallel_launch.py,
    which starts the ranks, joins the process group and tears it down): time every wrapper, and
    return each wrapper's slowest rank, gathered from all ranks. The launcher notes each
    collective call in a Python list, a few microseconds per call against steps of milliseconds."""
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    device = torch.device(device)
    rows = []
    for name in args.wrappers:
        try:
            row = _time_wrapper(adapters, name, args, device, rank)
        except Exception as error:  # noqa: BLE001  OOM, or a wrapper that fails on every rank: the others still run
            kind = "OOM" if isinstance(error, torch.cuda.OutOfMemoryError) else f"failed: {type(error).__name__}"
            print(f"rank {rank}: {name}: {kind}: {str(error)[:300]}", file=sys.stderr, flush=True)
            row = {"wrapper": name, "mean_s": float("nan"), "peak_bytes": 0, "error": kind}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        every: list = [None] * world_size
        dist.all_gather_object(every, row)
        slowest = max(every, key=lambda r: r["mean_s"] if r["mean_s"] == r["mean_s"] else float("inf"))
        rows.append({**slowest, "peak_bytes": max(r["peak_bytes"] for r in every)})
    return rows


def markdown(rows: list[dict], args) -> str:
    """The results as a Markdown table, with the conditions above it."""
    baseline = next((r["mean_s"] for r in rows if r["wrapper"] == "single"), None)
    size = f"{args.model_size}" + (f" shrunk to {TINY_OVERRIDES}" if args.tiny else "")
    lines = [
        f"Model {size}, context {args.context_length}, batch {args.batch_size} per rank, AdamW, fp32; "
        f"{args.world_size} ranks ({args.backend}); {args.warmup_steps} warm-up + {args.measure_steps} timed steps; "
        f"bucket {args.bucket_mb} MB; torch {torch.__version__}"
        + (f"; {_gpus().names()[0]}" if args.backend == "nccl" else ""),
        "",
        "| wrapper | step (ms) | exposed communication (ms) | share of step | peak memory (GiB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['wrapper']} | {r['error']} | | | |")
            continue
        step = r["mean_s"] * 1e3
        if baseline is None or r["wrapper"] == "single":
            comm, share = "0 (baseline)" if r["wrapper"] == "single" else "", ""
        else:
            exposed = max(0.0, r["mean_s"] - baseline) * 1e3
            comm, share = f"{exposed:.2f}", f"{exposed / step:.0%}"
        peak = f"{r['peak_bytes'] / 2**30:.2f}" if r["peak_bytes"] else "n/a (CPU)"
        lines.append(f"| {r['wrapper']} | {step:.2f} | {comm} | {share} | {peak} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", default=str(ROOT / "reference"), help="directory holding adapters.py")
    parser.add_argument("--model-size", default="small")
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=4, help="rows per rank")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl when CUDA is there")
    parser.add_argument("--wrappers", nargs="+", choices=WRAPPERS, default=list(WRAPPERS))
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--measure-steps", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="a shrunken model on CPU processes with gloo")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="kill the ranks after this long")
    parser.add_argument("--out", default=None, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    if args.tiny:
        args.backend = args.backend or "gloo"
        args.context_length = min(args.context_length, 32)
        args.warmup_steps, args.measure_steps = min(args.warmup_steps, 1), min(args.measure_steps, 2)
    args.backend = args.backend or ("nccl" if _gpus().count() else "gloo")
    if args.backend == "nccl" and _gpus().count() < args.world_size:
        parser.error(f"nccl needs {args.world_size} GPUs; found {_gpus().count()} (use --tiny or gloo)")
    for key, value in NCCL_ENV.items():
        os.environ.setdefault(key, value)  # before the launcher's fork server starts: every rank inherits them
    sys.path.insert(0, str(ROOT))
    from executor.probes.parallel_launch import launch

    adapters_file = Path(args.submission).resolve() / "adapters.py"
    run = launch(lambda: types.SimpleNamespace(__file__=str(adapters_file)),
                 "benchmarks.parallel_training_benchmark.rank_job", args.world_size, {"args": args},
                 backend=args.backend, timeout_s=args.timeout_s)
    if run["timed_out"]:
        print(f"error: the ranks did not finish within {args.timeout_s:.0f} s", file=sys.stderr)
        return 1
    if run["errors"]:
        for rank, error in sorted(run["errors"].items()):
            print(f"rank {rank} failed:\n{error}", file=sys.stderr)
        return 1
    rows = run["ranks"][0]["value"]
    table = markdown(rows, args)
    print(table, end="", flush=True)
    if args.out:
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
