"""The environment of a process that runs student code: built from scratch, the same way for
every such process (``harness/process.py`` builds the executor's).

Read by staff checking what a submission can learn from its environment. Nothing of the
starting process's environment passes but where the machine's GPU, libraries, compiler and
locale are (``MACHINE_VARIABLES``, ``MACHINE_PREFIXES``); the rest points into the process's own
folder (``own_folders``): home, temporary files and every compile cache, so that no cache is
shared with another grade or run, which could poison it.
"""

from __future__ import annotations

import os
from pathlib import Path

MACHINE_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
                     "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH", "CC", "CXX")
MACHINE_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")


def machine_env(also: tuple[str, ...] = ()) -> dict[str, str]:
    """The starting process's ``MACHINE_VARIABLES``, ``MACHINE_PREFIXES`` and the names in ``also``."""
    return {name: value for name, value in os.environ.items()
            if name in MACHINE_VARIABLES or name in also or name.startswith(MACHINE_PREFIXES)}


def own_folders(work: Path, user: str, triton_cache: Path | None = None) -> dict[str, str]:
    """Home, temporary files and compile caches under ``work`` (Triton's at ``triton_cache`` if given)."""
    cache = work / "cache"
    return {"HOME": str(work / "home"), "TMPDIR": str(work / "tmp"), "USER": user, "LOGNAME": user,
            "XDG_CACHE_HOME": str(cache), "TRITON_HOME": str(work / "home"),
            "TRITON_CACHE_DIR": str(triton_cache or cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "MPLCONFIGDIR": str(cache / "matplotlib"), "PYTHONDONTWRITEBYTECODE": "1"}
