"""What the harness holds of the submission: ``RemoteAdapters`` and ``RemoteObject``.

Read by the root ``conftest.py`` (which hands tests a ``RemoteAdapters`` under ``--isolate``), by
``harness/flash_cases.py`` and ``tests/checks/flash_bad_inputs.py``, and by ``client.py``, which turns each
handle that arrives into a ``RemoteObject`` and each ``RemoteObject`` passed back into its handle.
The contract:

- ``adapters.<name>(...)`` calls the adapter in the executor (``Executor.call``); an adapter in
  ``RemoteAdapters.TRITON_ADAPTERS`` tags its results "triton", so that calls of what it returns
  are replayed from their launch records (``replay.py``);
- a ``RemoteObject`` stays in the executor: its attributes and calls go there, and nothing can be
  set on it; it belongs to one process, so after a restart using it raises ``ExecutorFailure``;
  when the harness drops it, the executor is told to drop its object with the next request;
- ``recorded_launches(obj)``: the submission's kernel launches recorded so far in this test.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .process import ExecutorFailure

__tracebackhide__ = True  # pytest leaves these calls out of a failure's traceback: plumbing, not the test

if TYPE_CHECKING:
    from .client import Executor


class RemoteObject:
    """An object that stays in the executor: attributes and calls go there and come back as copies."""

    __slots__ = ("_executor", "_id", "_info", "_generation", "_tag", "__weakref__")

    def __init__(self, executor: Executor, handle: int, info: dict, tag: str | None = None):
        object.__setattr__(self, "_executor", executor)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_info", info)
        object.__setattr__(self, "_generation", executor.generation)
        object.__setattr__(self, "_tag", tag or executor._tag)
        weakref.finalize(self, executor.released, executor.generation, False, handle)

    def _check(self, executor: Executor) -> None:
        if executor is not self._executor or self._generation != executor.generation:
            raise ExecutorFailure(f"{self!r} belongs to a process of the submission that has since been restarted; "
                                  "get it again from adapters")

    @property
    def __name__(self) -> str:
        return self._info.get("name") or self._info.get("type", "object").rsplit(".", 1)[-1]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._check(self._executor)
        return self._executor.getattr(self._id, name, self._tag)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r} on an object of the submission's process")

    def __call__(self, *args, **kwargs) -> Any:
        self._check(self._executor)
        return self._executor.call(self._id, None, args, kwargs, self._tag)

    def __repr__(self) -> str:
        return f"<{self._info.get('type')} {self._info.get('name') or ''} in the submission's process>"


class RemoteAdapters:
    """The submission's ``adapters`` module, as seen from the harness: ``adapters.<name>(...)`` runs there."""

    TRITON_ADAPTERS = frozenset({"get_flashattention_autograd_function_triton"})

    def __init__(self, executor: Executor):
        self._executor = executor

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        executor = self._executor
        tag = "triton" if name in self.TRITON_ADAPTERS else None

        def call_adapter(*args, **kwargs):
            return executor.call(name, None, args, kwargs, tag)

        call_adapter.__name__ = name
        return call_adapter

    def probe(self, name: str, *args, tag: str | None = None, **kwargs) -> Any:
        """Run the kit's probe ``name`` (see executor/probes/) next to the submission."""
        return self._executor.probe(name, *args, tag=tag, **kwargs)


def recorded_launches(obj: Any) -> list[tuple[str, str]] | None:
    """The launches of the submission's ``@triton.jit`` kernels recorded so far in this test by
    the executor that holds ``obj`` (a copy), or None when ``obj`` lives in this process."""
    if isinstance(obj, RemoteObject):
        return list(obj._executor.launches)
    return None
