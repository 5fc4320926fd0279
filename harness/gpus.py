"""The kit's one GPU query: how many CUDA GPUs there are, and which.

Read by everything in the kit that asks whether there is a GPU: the root conftest (skip tests
marked ``gpu``, interpret Triton), the scorers, the grader (refuse ``--require-gpu``, size its
test processes), the batches (one slot per GPU), the leaderboard, the benchmarks and the
selftests. There are four ways to ask, because callers differ in what they may touch:

- ``count()`` and ``names()`` ask torch in this process. They are for processes that use CUDA
  anyway (test processes, the leaderboard's worker, the benchmarks), and they initialise CUDA's
  driver in the calling process.
- ``probe_count()`` asks the same question of a fresh interpreter, for a process that must not
  initialise CUDA itself: the grader. It never imports torch, so it starts in a fraction of the
  time and holds no CUDA context (a few hundred MiB on the GPU that its test processes share,
  for the whole grade). Its test processes are what use the GPU.
- ``listed()`` reads ``nvidia-smi``: every GPU the driver lists, with its memory, whatever
  ``CUDA_VISIBLE_DEVICES`` says, and without CUDA. The batch uses it to give each job GPUs of its
  own, and the grader uses it to size its test processes by GPU memory.
- ``driver_present()`` is the cheapest: whether this machine has an NVIDIA driver
  (``/dev/nvidiactl``). It starts no process and loads no library.

This file is released with the tests, which import it; it imports nothing from the kit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

NVIDIA_SMI_TIMEOUT_S = 30
"""How long ``listed()`` waits for ``nvidia-smi`` before it reports no GPU."""


def count() -> int:
    """How many CUDA GPUs this process can use (0 without CUDA). Initialises CUDA's driver here."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def names() -> list[str]:
    """The names of the CUDA GPUs this process can use, by index ([] without CUDA), e.g.
    ``["NVIDIA H200"]``. Initialises CUDA in this process."""
    import torch

    return [torch.cuda.get_device_name(index) for index in range(count())]


_PROBE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


def probe_count(python: str | None = None) -> int:
    """``count()`` as a fresh ``python -I`` (default: this interpreter) answers it: for a process
    that must not initialise CUDA or import torch itself. 0 when the probe fails (no torch, a
    crash). ``-I`` keeps the working folder and PYTHON* variables from choosing what it imports."""
    answer = subprocess.run([python or sys.executable, "-I", "-c", _PROBE], capture_output=True, text=True)
    try:
        return int(answer.stdout.strip()) if answer.returncode == 0 else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class ListedGPU:
    """One GPU as ``nvidia-smi`` lists it: its index on this machine, its name and its memory
    (None where nvidia-smi could not say)."""

    index: int
    name: str
    memory_mib: float | None


def listed() -> list[ListedGPU]:
    """Every GPU that ``nvidia-smi`` lists on this machine ([] without the driver, or when it fails
    or takes more than NVIDIA_SMI_TIMEOUT_S). Ignores CUDA_VISIBLE_DEVICES; needs no CUDA."""
    query = ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]
    try:
        answer = subprocess.run(query, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return []
    if answer.returncode != 0:
        return []
    found = []
    for line in answer.stdout.splitlines():
        index, _, rest = line.partition(",")
        name, _, memory = rest.rpartition(",")
        if not name or not index.strip().isdigit():
            continue
        try:
            memory_mib = float(memory)
        except ValueError:
            memory_mib = None
        found.append(ListedGPU(int(index), name.strip(), memory_mib))
    return found


def driver_present() -> bool:
    """Whether this machine has an NVIDIA driver (its control device exists): no process, no CUDA."""
    return os.path.exists("/dev/nvidiactl")
