"""Which functions of a submission are ``@triton.jit`` kernels, read from its source text.

The one reading of "this is the submission's own Triton" that every check shares:
``kernels_only.py`` (the replay loads exactly these functions) and the leaderboard (a GPU kernel
counts as the submission's Triton only under one of these names). It runs in the harness or the leaderboard's parent, on their own copies of the
files; nothing here imports or runs the submission.

A function is a kernel when it is decorated by ``triton.jit`` (bare or called with options,
alone or under ``triton.autotune`` / ``triton.heuristics``), or bound by
``name = triton.jit(function)``, where ``triton.jit`` may be reached through an alias:
``import triton as t``, ``import triton.language as tl`` (``tl.jit``), ``from triton import
jit as j``, ``t = triton`` or ``j = triton.jit`` anywhere in the same module. A decorator that
only ends in ``jit`` (``numba.cuda.jit``, a function of the submission's own named ``jit``)
does not count: on the leaderboard it would let a CUDA kernel of another kind pass for Triton.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _triton_aliases(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound to the triton module or one of its submodules, names bound to ``triton.jit``)."""
    modules, jits = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "triton" or alias.name.startswith("triton."):
                    modules.add(alias.asname or "triton")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            jits.update(alias.asname or alias.name for alias in node.names if alias.name == "jit")
    # ``t = triton`` and ``j = triton.jit``, followed until nothing new appears (an alias of an alias).
    assignments = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and all(isinstance(target, ast.Name) for target in node.targets)]
    grown = True
    while grown:
        grown = False
        for node in assignments:
            names = {target.id for target in node.targets}
            if _is_jit(node.value, modules, jits, calls=False):
                if not names <= jits:
                    jits |= names
                    grown = True
            elif _is_module(node.value, modules) and not names <= modules:
                modules |= names
                grown = True
    return modules, jits


def _is_module(node: ast.AST, modules: set[str]) -> bool:
    """Whether an expression is one of ``modules`` or an attribute path below one (``triton.language``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in modules


def _is_jit(node: ast.AST, modules: set[str], jits: set[str], calls: bool = True) -> bool:
    """Whether an expression is ``triton.jit`` or an alias of it (and, with ``calls``, a call of one: ``triton.jit(...)``)."""
    if calls and isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id in jits
    return isinstance(node, ast.Attribute) and node.attr == "jit" and _is_module(node.value, modules)


class KernelReader:
    """The reading of one module: ``is_kernel(function_node)`` and ``kernels()`` (its kernels' names)."""

    def __init__(self, tree: ast.AST):
        self.tree = tree
        self.modules, self.jits = _triton_aliases(tree)

    def is_kernel(self, node: ast.AST) -> bool:
        """Whether a ``def`` is decorated by ``triton.jit`` (possibly among other decorators)."""
        return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _is_jit(decorator, self.modules, self.jits) for decorator in node.decorator_list)

    def kernels(self) -> set[str]:
        """Names of the module's kernels: decorated functions and ``name = triton.jit(function)``."""
        names = set()
        for node in ast.walk(self.tree):
            if self.is_kernel(node):
                names.add(node.name)
            elif isinstance(node, ast.Call) and _is_jit(node.func, self.modules, self.jits, calls=False):
                if node.args and isinstance(node.args[0], ast.Name):
                    names.add(node.args[0].id)
        return names


def parsed_python(sources: dict[str, bytes | str]):
    """``(path, ast.Module)`` for each ``.py`` file of ``sources`` that parses, in path order."""
    for path, source in sorted(sources.items()):
        if not path.endswith(".py"):
            continue
        try:
            yield path, ast.parse(source, filename=path)
        except (SyntaxError, ValueError):
            continue


def kernels_in_sources(sources: dict[str, bytes | str]) -> dict[str, set[str]]:
    """``{relative path: names of its kernels}`` for the ``.py`` files of ``sources`` that define any.

    ``sources`` maps each file's path relative to the submission to its text or bytes. A file
    that does not parse defines nothing (it fails to import either way).
    """
    found: dict[str, set[str]] = {}
    for path, tree in parsed_python(sources):
        names = KernelReader(tree).kernels()
        if names:
            found[path] = names
    return found


def kernels_in_directory(directory: Path) -> dict[str, set[str]]:
    """``kernels_in_sources`` of every ``.py`` file under ``directory`` (paths relative to it, POSIX style)."""
    directory = Path(directory)
    sources = {}
    for path in sorted(directory.rglob("*.py")):
        try:
            sources[path.relative_to(directory).as_posix()] = path.read_bytes()
        except OSError:
            continue
    return kernels_in_sources(sources)
