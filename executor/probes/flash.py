"""Probes for the FlashAttention-2 tests: compiling the submission's Function where it lives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def compile_apply(load_adapters: Callable[[], Any], function: Any, backend: str) -> Callable[..., Any]:
    """``torch.compile(function.apply, backend=backend)``, after a ``torch._dynamo.reset()``."""
    torch._dynamo.reset()
    return torch.compile(function.apply, backend=backend)


PROBES = {"compile_apply": compile_apply}
