"""The kit's own code that must run next to the submission, in the executor.

Read by the executor (``server.py``), which runs a probe when the harness asks for it by name,
and by test helpers, which ask. A probe does what the harness cannot do across a process
boundary, for example compiling the submission's Function with ``torch.compile`` (the compiled
graph must be built where the Function lives). Each probe takes ``load_adapters`` (a function
returning the submission's ``adapters`` module) and plain arguments; what it returns crosses
back as data or handles. Probes report observations; every verdict on them is made in the harness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def compile_apply(load_adapters: Callable[[], Any], function: Any, backend: str) -> Callable[..., Any]:
    """``torch.compile(function.apply, backend=backend)``, after a ``torch._dynamo.reset()``."""
    torch._dynamo.reset()
    return torch.compile(function.apply, backend=backend)


PROBES: dict[str, Callable[..., Any]] = {
    "compile_apply": compile_apply,
}
