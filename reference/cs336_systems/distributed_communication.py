"""§3.1 distributed_communication: how long does an all-reduce take, by backend, size and process count?

Reference solution. Run it on a laptop CPU (gloo)::

    python -m cs336_systems.distributed_communication --backend gloo --sizes-mb 1 10 100 \
        --world-sizes 2 4 --plot all_reduce.png

or on a node with GPUs (NCCL, one process a GPU)::

    python -m cs336_systems.distributed_communication --backend nccl --sizes-mb 1 10 100 1000 \
        --world-sizes 2 --plot all_reduce.png

What to expect: a ring all-reduce of B bytes on n ranks sends and receives 2 (n - 1) / n * B
bytes per rank, so the time is a fixed latency (microseconds with NCCL, far more with gloo's
TCP) plus that traffic over the slowest link. The table reports the "bus bandwidth",
B / time * 2 (n - 1) / n, which NCCL's own tests report too: it is comparable across process
counts and, at large sizes, approaches the link's bandwidth.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from cs336_systems.benchmarking_script import _check_step_counts, _OneLineParser, _synchronize

SIZES_MB = (1.0, 10.0, 100.0, 1000.0)
"""Default all-reduce sizes in MB (1 MB = 2**20 bytes) of float32 data."""

BACKENDS = ("gloo", "nccl")
"""gloo runs on CPU tensors; NCCL on CUDA tensors, one process a GPU."""

MB = 2**20


def time_all_reduce(
    tensor: torch.Tensor,
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
    timer: Callable[[], float] = time.perf_counter,
    all_reduce: Callable[[torch.Tensor], Any] | None = None,
) -> list[float]:
    """Time ``measure_steps`` all-reduces of ``tensor`` after ``warmup_steps`` untimed ones.

    Each step is ``all_reduce(tensor)`` then ``synchronize()``; a timed step reads ``timer()``
    before the all-reduce and after the sync. Returns the durations in seconds, in order.
    """
    _check_step_counts(warmup_steps, measure_steps)
    reduce = dist.all_reduce if all_reduce is None else all_reduce  # looked up now: tests may wrap it
    for _ in range(warmup_steps):  # the first collectives set up connections and buffers
        reduce(tensor)
        synchronize()
    times = []
    for _ in range(measure_steps):
        start = timer()
        reduce(tensor)
        synchronize()  # NCCL only queues the all-reduce: wait for it inside the timed region
        times.append(timer() - start)
    return times


def benchmark_all_reduce(
    size_bytes: int, *, warmup_steps: int, measure_steps: int, device: str | torch.device
) -> dict[str, Any]:
    """All-reduce ``size_bytes`` bytes of float32 on every rank of the default group; time it.

    Returns the same summary on every rank: the mean is over every rank's measured steps (they
    are gathered with ``all_gather_object``).
    """
    _check_step_counts(warmup_steps, measure_steps)
    if not isinstance(size_bytes, int) or size_bytes < 4 or size_bytes % 4:
        raise ValueError(f"size_bytes must be a positive multiple of 4 (float32 elements); got {size_bytes!r}")
    device = torch.device(device)
    world_size = dist.get_world_size()
    tensor = torch.rand(size_bytes // 4, dtype=torch.float32, device=device)  # (size_bytes / 4,)
    times = time_all_reduce(
        tensor, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=lambda: _synchronize(device)
    )
    every_rank: list[list[float] | None] = [None] * world_size
    dist.all_gather_object(every_rank, times)
    mean_s = statistics.fmean(t for rank_times in every_rank for t in rank_times)
    algbw = size_bytes / mean_s / 1e9
    return {
        "backend": dist.get_backend(),
        "world_size": world_size,
        "size_bytes": size_bytes,
        "times": times,
        "mean_ms": mean_s * 1e3,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
    }


def markdown_table(results: list[dict[str, Any]]) -> str:
    """One Markdown table, a row per result of :func:`benchmark_all_reduce`, in the order given."""
    lines = [
        "| backend | processes | size (MB) | mean (ms) | bus bandwidth (GB/s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['backend']} | {r['world_size']} | {r['size_bytes'] / MB:g} | {r['mean_ms']:.3f} | "
            f"{r['busbw_gbps']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot_results(results: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """Write a PNG to ``path``: mean time (ms) against size (MB), log-log, a line per backend × process count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for key in sorted({(r["backend"], r["world_size"]) for r in results}):
        rows = sorted((r for r in results if (r["backend"], r["world_size"]) == key), key=lambda r: r["size_bytes"])
        axes.plot([r["size_bytes"] / MB for r in rows], [r["mean_ms"] for r in rows], marker="o",
                  label=f"{key[0]}, {key[1]} processes")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("all-reduce size (MB of float32)")
    axes.set_ylabel("mean time (ms)")
    axes.set_title("all-reduce time")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    """Benchmark every backend × process count × size given; print a Markdown table; optionally plot it.

    Returns 0; bad input prints one line ``distributed_communication: error: ...`` and returns 2.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if "nccl" in args.backend and max(args.world_sizes) > gpus:
        return parser.error_line(
            f"argument --backend: nccl needs one GPU per process; --world-sizes asks for {max(args.world_sizes)} "
            f"but this machine has {gpus} (use --backend gloo)")
    sizes = [_bytes_of(mb) for mb in args.sizes_mb]
    print(f"{args.warmup_steps} warm-up + {args.measure_steps} measured all-reduces of float32 per size; "
          f"torch {torch.__version__}")
    results = []
    for backend in args.backend:
        for world_size in args.world_sizes:
            results += run_ranks(backend, world_size, sizes, warmup_steps=args.warmup_steps,
                                 measure_steps=args.measure_steps)
    print(markdown_table(results), end="", flush=True)
    if args.plot:
        plot_results(results, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def run_ranks(backend: str, world_size: int, sizes: list[int], *, warmup_steps: int,
              measure_steps: int) -> list[dict[str, Any]]:
    """Start ``world_size`` processes (spawned), benchmark every size there; return rank 0's results."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="all-reduce-") as work:
        results = os.path.join(work, "results.pt")
        try:
            mp.start_processes(_rank_main, args=(world_size, backend, work, sizes, warmup_steps, measure_steps),
                               nprocs=world_size, join=True, start_method="spawn")
        except mp.ProcessExitedException:
            # Rank 0 writes the results once every rank has measured; a rank that dies after
            # that died in its teardown (gloo's threads can abort there), and the results stand.
            if not os.path.exists(results):
                raise
        return torch.load(results, weights_only=True)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _rank_main(rank: int, world_size: int, backend: str, work: str, sizes: list[int], warmup_steps: int,
               measure_steps: int) -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{os.path.join(work, 'store')}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=300))
    try:
        results = [benchmark_all_reduce(size, warmup_steps=warmup_steps, measure_steps=measure_steps, device=device)
                   for size in sizes]
        if rank == 0:  # written whole or not at all
            torch.save(results, os.path.join(work, "results.tmp"))
            os.replace(os.path.join(work, "results.tmp"), os.path.join(work, "results.pt"))
    finally:
        dist.destroy_process_group()


def _bytes_of(mb: float) -> int:
    return max(4, int(mb * MB) // 4 * 4)


def _number_at_least(kind: type, minimum: float) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__} >= {minimum}; got {text!r}")
        return value

    return parse


def _build_parser() -> _OneLineParser:
    parser = _OneLineParser(prog="distributed_communication",
                            description="Time all-reduce by backend, size and number of processes.")
    parser.add_argument("--backend", nargs="+", default=["nccl" if torch.cuda.is_available() else "gloo"],
                        choices=BACKENDS)
    parser.add_argument("--sizes-mb", nargs="+", type=_number_at_least(float, 1e-6), default=list(SIZES_MB))
    parser.add_argument("--world-sizes", nargs="+", type=_number_at_least(int, 2), default=[2])
    parser.add_argument("--warmup-steps", type=_number_at_least(int, 0), default=5, help="untimed all-reduces (>= 0)")
    parser.add_argument("--measure-steps", type=_number_at_least(int, 1), default=10, help="timed ones (>= 1)")
    parser.add_argument("--plot", default=None, help="write a PNG plot of time against size here")
    return parser


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
