"""Import a submission's code: its ``cs336_systems`` package, then its ``adapters`` module.

The one import step of a submission, shared by every process that runs one: the executor
(``server.py``, which may import nothing outside this package and ``confine``, so the step lives
here), and through ``harness/submission.py``'s ``load_adapters`` the tests' own process (without
``--isolate``) and the leaderboard's worker. Both modules are registered in ``sys.modules``
straight from the submission's files, so that whatever is on ``sys.path`` (the kit's root holds
stubs of the same names) can never shadow them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

# The submission's modules, in import order: (name, file, package folder or None).
MODULES = (("cs336_systems", "cs336_systems/__init__.py", "cs336_systems"), ("adapters", "adapters.py", None))


def import_submission(directory: str | os.PathLike) -> ModuleType:
    """Run ``directory``'s ``cs336_systems/__init__.py`` and then its ``adapters.py``; return ``adapters``.

    Whatever the submission's code raises propagates (SystemExit too); the module whose code
    raised is taken out of ``sys.modules`` again, so that a later call runs it afresh.
    """
    for name, file, package in MODULES:
        path = os.path.join(directory, file)
        search = [os.path.join(directory, package)] if package else None
        spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)  # the module may have taken itself out already
            raise
    return sys.modules["adapters"]
