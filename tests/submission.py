"""Load the submission under test: its ``adapters`` module and its ``cs336_systems`` package.

A submission is a directory that holds ``adapters.py`` and ``cs336_systems/``. The student's
checkout is one, the staff solution is another, and every buggy or cheating variant the grader
is tested with is another. Tests reach student code only through the ``adapters`` module returned
here, never by importing ``cs336_systems`` themselves.

Both modules are registered in ``sys.modules`` straight from the submission's files, so that
whatever pytest later puts on ``sys.path`` (the kit root holds stubs of the same names) can
never shadow them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ENV_VAR = "CS336_SUBMISSION"


class SubmissionError(RuntimeError):
    """The submission directory is missing something, or its code fails to import."""


def resolve_submission_dir(option: str | None, default: Path) -> Path:
    """Pick the submission directory: the --submission option, then $CS336_SUBMISSION, then default."""
    chosen = option or os.environ.get(ENV_VAR) or str(default)
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        raise SubmissionError(
            f"submission directory {chosen!r} does not exist; pass --submission DIR or set "
            f"{ENV_VAR}=DIR to a directory holding adapters.py and cs336_systems/"
        )
    missing = [name for name in ("adapters.py", "cs336_systems/__init__.py") if not (path / name).is_file()]
    if missing:
        raise SubmissionError(
            f"submission directory {path} has no {' or '.join(missing)}; a submission is a "
            "directory holding adapters.py and the cs336_systems/ package (with its __init__.py)"
        )
    return path


def _load(name: str, file: Path, package_dir: Path | None = None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, file, submodule_search_locations=[str(package_dir)] if package_dir else None
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_adapters(directory: Path) -> ModuleType:
    """Import ``cs336_systems`` and then ``adapters`` from ``directory``; return ``adapters``.

    Raises SubmissionError, naming the file, when either fails to import, and when a module of
    that name was already imported from somewhere else in this process.
    """
    directory = Path(directory).resolve()
    for name in ("cs336_systems", "adapters"):
        loaded = sys.modules.get(name)
        if loaded is not None:
            where = Path(getattr(loaded, "__file__", "") or "").resolve()
            if directory not in where.parents:
                raise SubmissionError(
                    f"module {name!r} was already imported from {where}, not from the submission "
                    f"{directory}; run each submission in its own pytest process"
                )
    if "adapters" in sys.modules:
        return sys.modules["adapters"]
    try:
        _load("cs336_systems", directory / "cs336_systems" / "__init__.py", directory / "cs336_systems")
        return _load("adapters", directory / "adapters.py")
    except SubmissionError:
        raise
    except BaseException as error:  # SystemExit too: a submission must not end the test run
        raise SubmissionError(
            f"importing the submission in {directory} failed with {type(error).__name__}: {error}. "
            "Fix the import error first: run `.venv/bin/python -c 'import adapters'` at the root of your "
            "checkout (where .venv is)."
        ) from error
