"""§3.1 distributed_communication: how long does an all-reduce take, by backend, size and process count?

You write five things here (see handout/README.md, §3.1):

1. ``time_all_reduce``: the timing loop of one rank (warm-up, then timed all-reduces);
2. ``benchmark_all_reduce``: one size on every rank of an initialised process group;
3. ``markdown_table`` and ``plot_results``: the report;
4. ``run_ranks``: start the processes of one (backend, process count) and bring back results;
5. ``main``: the command line, so that you can run, for example::

       python -m cs336_systems.distributed_communication --backend nccl --sizes-mb 1 10 100 1000 \\
           --world-sizes 2 4 6 --plot all_reduce.png

Why the timing loop has the shape it has: with NCCL, ``dist.all_reduce`` returns as soon as
the collective is *queued* on the GPU, so a timer read right after it measures nothing; a
``torch.cuda.synchronize()`` must sit inside the timed region. And the first collectives of a
process group set up connections and buffers, so a few untimed warm-up all-reduces run first.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.1 distributed_communication"

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

    A *step* is ``all_reduce(tensor)`` followed by ``synchronize()``. ``all_reduce`` defaults
    to ``torch.distributed.all_reduce`` (look it up when called, not at import: tests replace it).

    * Warm-up: ``warmup_steps`` steps, untimed.
    * Measurement: for each of the ``measure_steps`` steps, read ``timer()``, call
      ``all_reduce(tensor)``, call ``synchronize()``, read ``timer()`` again. The sync is inside
      the timed region. Read time only through ``timer``.

    Returns:
        ``measure_steps`` floats: each timed step's duration in seconds, in order.

    Raises:
        ValueError: ``warmup_steps`` < 0 or ``measure_steps`` < 1 (name the argument and value).
    """
    raise not_implemented(__file__, "time_all_reduce", _SECTION)


def benchmark_all_reduce(
    size_bytes: int, *, warmup_steps: int, measure_steps: int, device: str | torch.device
) -> dict[str, Any]:
    """All-reduce ``size_bytes`` bytes of float32 on every rank of the default process group; time it.

    Runs on every rank, after ``torch.distributed.init_process_group``. Allocate one float32
    tensor of ``size_bytes // 4`` random elements on ``device``, time it with
    :func:`time_all_reduce` (``synchronize`` calls ``torch.cuda.synchronize()`` on a CUDA device
    and does nothing on the CPU), then gather every rank's times with
    ``torch.distributed.all_gather_object`` so that every rank returns the same summary.

    Returns:
        A dict with ``backend`` (str, ``dist.get_backend()``), ``world_size`` (int),
        ``size_bytes`` (int), ``times`` (this rank's measured times, seconds), ``mean_ms`` (float:
        the mean of *every rank's* measured times, in ms), ``algbw_gbps`` (size_bytes / mean
        time, in GB/s of 1e9 bytes) and ``busbw_gbps`` (``algbw_gbps * 2 * (world_size - 1) /
        world_size``: the bytes each rank moves in a ring all-reduce).

    Raises:
        ValueError: ``size_bytes`` is not a positive multiple of 4; bad step counts. Check
            before any collective.
    """
    raise not_implemented(__file__, "benchmark_all_reduce", _SECTION)


def markdown_table(results: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`benchmark_all_reduce` results, one row each, in the order given.

    Header ``| backend | processes | size (MB) | mean (ms) | bus bandwidth (GB/s) |``, then the
    separator row, then one row per result (size in MB of 2**20 bytes). Ends with a newline.
    """
    raise not_implemented(__file__, "markdown_table", _SECTION)


def plot_results(results: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """Write a PNG plot to ``path``: mean time (ms) against size (MB), one line per backend × process count.

    Use log scales on both axes, label them with their units, and give a legend. Use
    matplotlib's non-interactive ``Agg`` backend (no display is needed).
    """
    raise not_implemented(__file__, "plot_results", _SECTION)


def main(argv: list[str] | None = None) -> int:
    """The command line: benchmark every backend × process count × size; print a table; plot it.

    Options: ``--backend`` (one or more of ``BACKENDS``; default nccl when CUDA is available,
    else gloo), ``--sizes-mb`` (one or more floats > 0; default ``SIZES_MB``),
    ``--world-sizes`` (one or more ints >= 2; default 2), ``--warmup-steps`` (int >= 0,
    default 5), ``--measure-steps`` (int >= 1, default 10), ``--plot PATH`` (optional PNG).

    Prints one line saying the conditions, then :func:`markdown_table` of every result (backend
    by backend, process count by process count, sizes in the order given) to stdout; with
    ``--plot``, writes :func:`plot_results` there. Sizes become bytes as
    ``max(4, int(mb * MB) // 4 * 4)``.

    Returns:
        0 after a run or ``--help``. Bad input (unknown backend, a size <= 0, a world size < 2,
        bad step counts, NCCL asked for more processes than there are GPUs): print exactly one
        line ``distributed_communication: error: <what is wrong>`` to stderr and return 2
        before starting any process.
    """
    raise not_implemented(__file__, "main", _SECTION)


def run_ranks(backend: str, world_size: int, sizes: list[int], *, warmup_steps: int,
              measure_steps: int) -> list[dict[str, Any]]:
    """Start ``world_size`` processes; on each, join a process group and benchmark every size.

    Start the processes with ``torch.multiprocessing`` (spawn or forkserver: never fork a
    process that has used CUDA). Each process ``r`` calls ``init_process_group(backend,
    rank=r, world_size=world_size, ...)`` (with NCCL, first ``torch.cuda.set_device(r)``), runs
    :func:`benchmark_all_reduce` for each of ``sizes`` (bytes) and leaves the group; rank 0
    hands its results back to the parent (a file in a temporary directory works).

    Returns:
        The results of :func:`benchmark_all_reduce`, one per size, in the order of ``sizes``.
    """
    raise not_implemented(__file__, "run_ranks", _SECTION)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
