"""Put ``triton.language`` back as it was between requests: Triton's interpreter leaves it patched.

Read by whoever maintains the executor (``server.py``) and the replay process (``replay_server.py``),
the two processes that run a submission's kernels for many tests in turn.

Under ``TRITON_INTERPRET=1`` a launch replaces the language's builtins (``tl.full``, ``tl.load``,
...) with interpreter versions and restores them when the launch ends. A call of one ``@triton.jit``
function from another (a device-function call: ``tl.zeros`` is one, a jit function of
``triton/language/standard.py``) patches the modules the called function sees again, and nothing
restores those. Seen with triton 3.6: after one launch that calls ``tl.zeros`` and succeeds, 61
attributes of ``triton.language.core`` are still the interpreter's (``core.static_print`` is
``print``). Every later kernel of the process then runs on a language an earlier test left, so a
test's verdict or message could depend on which tests ran before it in the same process; a
failing launch can leave more behind. A grade must not depend on order, so between requests every
attribute of the language's modules and classes that differs from the snapshot is set back.

What a launch adds to the language's classes goes too (``tensor.__index__`` and ``__bool__``:
with them an interpreted tensor passes for an int outside a kernel, so ``torch.zeros(n)`` with
an ``n`` from ``tl.cdiv`` worked after some earlier test's kernel and failed before it). Names
added to a module stay: they are the interpreter's globals, copied into the module of each
function it rewrites, and the rewritten functions it caches look them up when they run again.
A module bound as an attribute (a package's submodule) is left as the import system set it.

Only under the interpreter (``snapshot_if_interpreted``): a compiled launch on a GPU does not
patch the language, so there is nothing to set back, and a GPU grade runs exactly as before.
"""

from __future__ import annotations

import inspect
import os
import sys

_PREFIX = "triton.language"
_LEFT_ALONE = frozenset({"__annotations__", "__dict__", "__weakref__", "__doc__"})


def _namespaces() -> dict[str, object]:
    """{name: object} for every imported module of ``triton.language`` and every class defined in one."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == _PREFIX or name.startswith(_PREFIX + ".")):
            continue
        found[name] = module
        for value in list(vars(module).values()):
            if inspect.isclass(value) and str(getattr(value, "__module__", "")).startswith(_PREFIX):
                found.setdefault(f"{value.__module__}.{value.__qualname__}", value)
    return found


class LanguageSnapshot:
    """The attributes of ``triton.language``'s modules and classes at the moment of construction.

    ``restore()`` sets back each of those attributes whose value has changed since, removes what
    was added to those classes, and returns the names it set back (``"triton.language.core.full"``,
    ...), so that the next request sees the language as it was here (see the module docstring for
    what it leaves). Raises ImportError when Triton is not installed."""

    def __init__(self) -> None:
        import triton.language  # noqa: F401  the modules a snapshot covers

        self._saved = {name: (space, dict(vars(space))) for name, space in _namespaces().items()}

    def _differences(self):
        """(namespace, its name, attribute, the snapshot's value or _MISSING) for each attribute
        that differs from the snapshot: changed, gone, or added to a class."""
        for name, (space, saved) in self._saved.items():
            current = dict(vars(space))
            added = [key for key in current if key not in saved] if inspect.isclass(space) else []
            for key in [*saved, *added]:
                value, now = saved.get(key, _MISSING), current.get(key, _MISSING)
                if key in _LEFT_ALONE or now is value or inspect.ismodule(now) or inspect.ismodule(value):
                    continue
                yield space, name, key, value

    def changed(self) -> list[str]:
        """The attributes that differ from the snapshot (the ones ``restore`` sets back)."""
        return [f"{name}.{key}" for _, name, key, _ in self._differences()]

    def restore(self) -> list[str]:
        restored = []
        for space, name, key, value in list(self._differences()):
            try:
                if value is _MISSING:
                    delattr(space, key)
                else:
                    setattr(space, key, value)
            except (AttributeError, TypeError):  # a read-only slot: nothing can have patched it
                continue
            restored.append(f"{name}.{key}")
        return restored


_MISSING = object()


def snapshot_if_interpreted() -> LanguageSnapshot | None:
    """A LanguageSnapshot under ``TRITON_INTERPRET=1`` (where launches patch the language), else None."""
    return LanguageSnapshot() if os.environ.get("TRITON_INTERPRET") == "1" else None
