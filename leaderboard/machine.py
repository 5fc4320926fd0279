"""What a leaderboard record was measured on: the GPU, and the versions of torch, Triton, CUDA and Python.

Read by the parent (``parent.judgement_record`` writes it into every record, which ``table`` and
``selftest`` print) and by the worker (its ``done`` message carries its own). Kept out of
``worker.py`` so that the trusted parent never imports the module the untrusted worker runs.
"""

from __future__ import annotations

import platform

from harness import gpus


def environment() -> dict:
    """``{"gpu", "torch", "triton", "cuda", "python"}`` of this process: the first CUDA GPU's name
    (``"none (CPU)"`` without one) and the versions imported here. Initialises CUDA."""
    import torch
    import triton

    present = gpus.names()
    gpu = present[0] if present else "none (CPU)"
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
