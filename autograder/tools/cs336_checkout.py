"""Turn a checkout of CS336's own assignment 2 repository into a submission this kit can grade.

Staff only. For a course moving to this kit with work written against CS336's repository, and
for checking the grader on real student code. CS336's layout is ``cs336_systems/`` plus
``tests/adapters.py``; this kit's is ``cs336_systems/`` plus ``adapters.py`` with its own
function names. The converted submission is the kit's student files (stubs) with:

- the checkout's ``cs336_systems/`` laid over them (the checkout's file wins where both have one);
- in the kit's ``adapters.py``, each function that CS336's adapters also define (by default the
  two FlashAttention getters, which have the same names in both) replaced by the checkout's
  body, with the checkout's top-level imports that body uses moved inside it, so that an import
  the kit cannot satisfy (``cs336_basics``, a module of another problem) fails only that
  function's tests.

Every other problem keeps the kit's stub and scores 0. Grade the result with
``python -m autograder grade OUT --problems flash_forward_pytorch,flash_forward_triton,flash_backward``.

    python -m autograder.tools.cs336_checkout CHECKOUT OUT [--functions NAME,NAME]

CHECKOUT is a folder (a clone or an unpacked zip). Exit 2, naming what is wrong, when it has no
``cs336_systems/`` or ``tests/adapters.py``, when that file does not parse, or when OUT already
exists (nothing is written then).
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.cs336_checkout")

import argparse
import ast
import builtins
import shutil
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
FLASH_GETTERS = ("get_flashattention_autograd_function_pytorch", "get_flashattention_autograd_function_triton")


def _used_names(function: ast.FunctionDef) -> set[str]:
    return {node.id for node in ast.walk(function) if isinstance(node, ast.Name)}


def _imports_used(imports: list[ast.Import | ast.ImportFrom], used: set[str]) -> list[str]:
    """The statements of ``imports`` cut down to the names in ``used``. A star import cannot go
    inside a function, so it becomes ``from MODULE import NAME`` for each used name that no other
    import binds (the last star import wins, as at module level)."""
    lines, bound, stars = [], set(), []
    for node in imports:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if any(alias.name == "*" for alias in node.names):
            stars.append(node)
            continue
        kept = [alias for alias in node.names if (alias.asname or alias.name).split(".")[0] in used]
        if kept:
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in kept}
            cut = ast.Import(names=kept) if isinstance(node, ast.Import) else ast.ImportFrom(
                module=node.module, names=kept, level=node.level)
            lines.append(ast.unparse(cut))
    free = sorted(used - bound - set(dir(builtins)))
    if stars and free:
        star = stars[-1]
        lines.append(ast.unparse(ast.ImportFrom(module=star.module, names=[ast.alias(n) for n in free],
                                                level=star.level)))
    return lines


def transplanted_body(source: str, name: str) -> list[str] | None:
    """The lines of the body of function ``name`` in CS336 adapters ``source``, preceded by the
    top-level imports it uses, indented one level; None when the source does not define it."""
    tree = ast.parse(source)
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    function = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name), None)
    if function is None:
        return None
    body = function.body
    if ast.get_docstring(function, clean=False) is not None and len(body) > 1:
        body = body[1:]  # its docstring: the kit's is kept
    local = {target.id for node in ast.walk(function) if isinstance(node, (ast.Assign, ast.For))
             for target in ast.walk(node.targets[0] if isinstance(node, ast.Assign) else node.target)
             if isinstance(target, ast.Name)}
    local |= {arg.arg for arg in function.args.args + function.args.kwonlyargs}
    local |= {(alias.asname or alias.name).split(".")[0] for node in ast.walk(function)
              if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    statements = _imports_used(imports, _used_names(function) - local) + [ast.unparse(node) for node in body]
    return ["    " + line for statement in statements for line in statement.splitlines()]


def replace_functions(kit_source: str, cs336_source: str, names: tuple[str, ...]) -> tuple[str, list[str]]:
    """The kit's adapters source with each function of ``names`` given the CS336 body; also the
    names CS336's adapters did not define (left as the kit's stub)."""
    lines = kit_source.splitlines()
    missing = []
    tree = ast.parse(kit_source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name in sorted(names, key=lambda n: -functions[n].lineno):  # from the bottom, so line numbers hold
        body = transplanted_body(cs336_source, name)
        if body is None:
            missing.append(name)
            continue
        function = functions[name]
        first = function.body[0]
        keep_docstring = ast.get_docstring(function, clean=False) is not None
        start = first.end_lineno if keep_docstring else first.lineno - 1
        lines[start:function.end_lineno] = body
    return "\n".join(lines) + "\n", sorted(missing)


def convert(checkout: Path, out: Path, names: tuple[str, ...] = FLASH_GETTERS) -> tuple[list[str], list[str]]:
    """Write the kit submission made from ``checkout`` to ``out``; return the functions left as
    stubs and the checkout's modules outside ``cs336_systems/`` that its adapters import."""
    package, adapters = checkout / "cs336_systems", checkout / "tests" / "adapters.py"
    for path in (package, adapters):
        if not path.exists():
            raise SystemExit(f"cs336_checkout: {checkout} has no {path.relative_to(checkout)}: give the root of a "
                             f"checkout of CS336's assignment 2 (it holds cs336_systems/ and tests/adapters.py)")
    if out.exists():
        raise SystemExit(f"cs336_checkout: {out} already exists; give a new folder (nothing was written)")
    cs336_adapters = adapters.read_text()
    try:
        ast.parse(cs336_adapters)
    except SyntaxError as error:
        raise SystemExit(f"cs336_checkout: {adapters} does not parse: {error.msg} at line {error.lineno}; fix it "
                         f"there and run this again (nothing was written)") from None
    kit_adapters = (KIT / "adapters.py").read_text()
    unknown = [name for name in names if f"def {name}(" not in kit_adapters]
    if unknown:
        raise SystemExit(f"cs336_checkout: the kit's adapters.py has no function {', '.join(unknown)}")
    shutil.copytree(KIT / "cs336_systems", out / "cs336_systems", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(package, out / "cs336_systems", dirs_exist_ok=True, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    source, missing = replace_functions(kit_adapters, cs336_adapters, names)
    (out / "adapters.py").write_text(source)
    return missing, outside_package(checkout, cs336_adapters)


def outside_package(checkout: Path, adapters_source: str) -> list[str]:
    """Modules CS336's adapters import from the checkout but outside ``cs336_systems/``: the kit
    grades only that package, so such an import fails in the converted submission."""
    nodes = list(ast.walk(ast.parse(adapters_source)))
    roots = {(node.module or "").split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom) and node.level == 0}
    roots |= {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    return sorted(root for root in roots - {"cs336_systems", "tests", ""}
                  if (checkout / root).is_dir() or (checkout / f"{root}.py").is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="root of a CS336 assignment 2 checkout")
    parser.add_argument("out", type=Path, help="new folder for the kit submission")
    parser.add_argument("--functions", default=",".join(FLASH_GETTERS),
                        help="comma-separated adapter functions to take from the checkout (default: the two "
                             "FlashAttention getters)")
    args = parser.parse_args(argv)
    try:
        missing, outside = convert(args.checkout, args.out, tuple(filter(None, args.functions.split(","))))
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    for name in missing:
        print(f"cs336_checkout: {args.checkout}'s tests/adapters.py does not define {name}; left as the kit's stub")
    for module in outside:
        print(f"cs336_checkout: its adapters import {module}, which is outside cs336_systems/: the grader reads only "
              f"cs336_systems/, so that import will fail; move {module} into cs336_systems/ and fix its imports")
    print(f"cs336_checkout: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
