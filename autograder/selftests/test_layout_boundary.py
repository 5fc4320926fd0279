"""The trust boundary on a folder line: ``executor/`` (what runs beside the submission, in its
process) imports nothing of the trusted side, and no product package imports the tests.

Imports are read with ``ast`` from every module's source, relative ones resolved, so a string or a
comment that names a package is no import, and an import inside a function is one. ``executor/``
is copied into the executor's folder with only confine's files beside it (harness/process.py): an
import of ``harness``, ``tests``, ``autograder`` or ``leaderboard`` there would fail in the executor,
or reach the trusted side's code from the submission's process. The product packages are the kit
itself; only tests (``tests/``, the hidden tests, the selftests) may import ``tests``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
TRUSTED_SIDE = ("harness", "tests", "autograder", "leaderboard")
PRODUCT_PACKAGES = ("executor", "harness", "autograder", "leaderboard", "benchmarks", "gpu_checks", "fixtures", "confine")
TEST_FOLDERS = ("autograder/hidden_tests", "autograder/selftests", "leaderboard/tests")
# Imports of a ``tests`` package that is not the kit's: the upstream CS336 checkout's own tests.
NOT_THE_KITS_TESTS = {"autograder/peer_checks/bitwise_floor.py": {"tests.test_fsdp"}}


def imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``), with
    relative imports resolved against ``package``, the dotted package the module belongs to."""
    parts = package.split(".")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules_of(folder: str) -> list[Path]:
    """The kit's own modules under ``folder``: not tests, nor a submission's files (the fixtures'
    submissions, each a folder holding ``cs336_systems/``, whose attacks may import anything)."""
    found = []
    for path in sorted((KIT / folder).rglob("*.py")):
        relative = path.relative_to(KIT)
        in_tests = any(relative.as_posix().startswith(tests + "/") for tests in TEST_FOLDERS)
        in_submission = any((KIT / parent / "cs336_systems").is_dir() for parent in relative.parents[:-1])
        if not in_tests and not in_submission:
            found.append(path)
    return found


def importers(folders: tuple[str, ...], packages: tuple[str, ...], allowed: dict[str, set[str]]) -> list[str]:
    """``path: module`` for each import, in the modules of ``folders``, of a module of ``packages``."""
    found = []
    for folder in folders:
        for path in modules_of(folder):
            relative = path.relative_to(KIT).as_posix()
            package = ".".join(path.relative_to(KIT).parent.parts)
            found += [f"{relative}: {module}" for module in sorted(imported_modules(path.read_text(), package))
                      if module.split(".")[0] in packages
                      and not any(module == a or module.startswith(a + ".") for a in allowed.get(relative, ()))]
    return found


def test_the_executor_imports_nothing_of_the_trusted_side():
    assert modules_of("executor"), "the kit has no executor/ package"
    found = importers(("executor",), TRUSTED_SIDE, {})
    assert not found, ("executor/ runs beside the submission and must import nothing of the trusted side "
                       "(move what it needs into executor/, or the code that needs it out):\n" + "\n".join(found))


def test_no_product_package_imports_the_tests():
    found = importers(PRODUCT_PACKAGES, ("tests",), NOT_THE_KITS_TESTS)
    assert not found, ("product code must not import tests/ (move what both need into harness/):\n"
                       + "\n".join(found))


@pytest.mark.parametrize(("source", "expected"), [
    ("import harness.gpus", {"harness.gpus"}),
    ("def f():\n    from tests.checks import model_spies", {"tests.checks", "tests.checks.model_spies"}),
    ("from ..wire import Codec", {"executor.wire", "executor.wire.Codec"}),
    ("from . import ddp", {"executor.probes", "executor.probes.ddp"}),
    ("x = 'from tests import checks'  # import tests", set()),
])
def test_imports_are_read_from_the_syntax_and_resolved(source, expected):
    assert imported_modules(source, "executor.probes") == expected
