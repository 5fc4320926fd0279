"""The kit's own code that must run next to the submission, in the executor.

Read by the executor (``server.py``), which runs a probe when the harness asks for it by name,
and by tests, which ask through ``run_probe``. A probe does what the harness cannot do across a
process boundary: compile the submission's Function where it lives, count the forward passes
of a model inside a benchmark, record NVTX ranges. Each probe takes ``load_adapters`` (a
function returning the submission's ``adapters`` module) and plain arguments, and returns
observations (plain data, tensors or handles). Every verdict on them is made in the harness.
A probe whose reply can pass 64 MiB sets ``reply_bytes`` on its function (read by the harness
from its own copy; see ``client.reply_limit``).

A probe is named ``"<module>.<name>"``: the function listed as ``name`` in the ``PROBES`` dict
of this package's module ``<module>.py`` (one module per problem). Without ``--isolate`` the
same function runs in the test's own process, so both ways test the same thing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def find(name: str) -> Callable[..., Any]:
    """The probe called ``name`` ("<module>.<function>"); KeyError if there is none."""
    module_name, _, function = name.partition(".")
    if not module_name.isidentifier() or not function:
        raise KeyError(f"no probe named {name!r}")
    try:
        module = importlib.import_module(f".{module_name}", __name__)
    except ModuleNotFoundError:
        raise KeyError(f"no probe module {module_name!r}") from None
    probes = getattr(module, "PROBES", {})
    if function not in probes:
        raise KeyError(f"no probe named {name!r}")
    return probes[function]


def table() -> dict[str, Callable[..., Any]]:
    """Every probe, by name: the executor takes this once, before the submission is imported."""
    import pkgutil

    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f".{info.name}", __name__)
        found.update({f"{info.name}.{name}": function for name, function in getattr(module, "PROBES", {}).items()})
    return found


def run_probe(adapters: Any, name: str, *args, **kwargs) -> Any:
    """Run probe ``name`` next to the submission: in the executor under --isolate, else here."""
    remote = getattr(type(adapters), "probe", None)
    if remote is not None:
        return adapters.probe(name, *args, **kwargs)
    return find(name)(lambda: adapters, *args, **kwargs)
