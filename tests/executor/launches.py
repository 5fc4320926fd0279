"""Which Triton kernels ran: a launch log installed before the submission is imported.

Read by the executor (``server.py``), which installs it, and by ``pytest`` runs without
``--isolate``, which install it in their own process. Every launch of a ``@triton.jit``
function (``kernel[grid](...)``, directly or through ``@triton.autotune`` and
``@triton.heuristics``) goes through ``JITFunction.run`` on a GPU and through
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``; both are wrapped here to note the
kernel's name and the file that defines it. Kernels that torch.compile, FlexAttention or other
libraries generate are launched another way and never appear, and launches of kernels defined
outside the submission are dropped: what is left is the submission's own Triton work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    """One launch: the kernel's function name and the file (relative to the submission) that defines it."""

    name: str
    file: str


class LaunchLog:
    """Notes each launch of a Triton kernel defined under ``root``; ``take()`` returns and clears them.

    With ``root`` None every launch is noted, its ``file`` the defining file's real path: the
    leaderboard's ``--cpu`` run, whose parent judges the names against its own reading of the
    submission's source (``triton_source.py``).
    """

    def __init__(self, root: str | None):
        self.root = None if root is None else os.path.join(os.path.realpath(root), "")
        self._launches: list[Launch] = []

    def install(self) -> None:
        """Wrap Triton's launch paths; call before the submission imports triton. A log installed
        before in this process is replaced (the newest log notes every launch, once)."""
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            if getattr(cls.run, "_cs336_launch_log", None) is self:
                continue
            cls.run = self._wrap(getattr(cls.run, "_cs336_original", cls.run))

    def _wrap(self, run):
        log = self

        def logged_run(kernel, *args, **kwargs):
            if not kwargs.get("warmup", False):
                log._note(getattr(kernel, "fn", None))
            return run(kernel, *args, **kwargs)

        logged_run._cs336_launch_log = self
        logged_run._cs336_original = run
        return logged_run

    def _note(self, fn) -> None:
        code = getattr(fn, "__code__", None)
        if code is None:
            return
        path = os.path.realpath(code.co_filename)
        if self.root is None:
            self._launches.append(Launch(fn.__name__, path))
        elif path.startswith(self.root):
            self._launches.append(Launch(fn.__name__, os.path.relpath(path, self.root)))

    def take(self) -> list[Launch]:
        """The launches noted since the last call, in order."""
        launches, self._launches = self._launches, []
        return launches
