"""The submission's kernels and nothing else: the modules a replay loads, read from the source text.

Read by the harness (``replay.py``, which writes these modules for the replay process, and
``client.py``, which takes the autotune configs from here) and by the leaderboard's parent.
Nothing here imports or runs the submission: it reads the harness's own copy of the files.

For each ``.py`` file that defines ``@triton.jit`` functions (``triton_source.py``'s reading),
the kernels-only module keeps:

- its imports of ``triton`` (any submodule) and ``math``, and ``from <submission module> import
  <names>`` for names that are kernels or constants there;
- module-level constants: a name bound to a literal, to arithmetic on literals and other kept
  constants, to ``tl.constexpr(...)`` of one, or to a ``math`` function of them;
- each ``@triton.jit`` function, with ``@triton.jit`` as its only decorator (``@triton.autotune``
  and ``@triton.heuristics`` are dropped: a replay launches each kernel with the exact constants
  of a launch), and ``name = triton.jit(function)``;
- nothing else: no launcher, no ``autograd.Function``, no other code of the submission.

A kernel body may use only its parameters and locals, the kept names, Triton, ``math`` and a
few plain builtins (``ALLOWED_BUILTINS``); attributes only from the public names of Triton's
language and of ``math`` (``allowed_attributes``: never ``handle``, which leads from an
interpreted tensor to its NumPy array); and no import, ``lambda``, class, nested function,
comprehension, ``global``, ``try`` or ``with``. A body that breaks this rule is left out, and
``problems`` says where and why: a replay of a launch of it fails with that reason. On a GPU
Triton compiles each body, so only Triton runs; under the CPU interpreter a body runs as Python,
and this rule is what keeps that Python within Triton's language.

``autotune_configs`` reads each ``@triton.autotune``'s ``configs=`` without running it: a list
(or comprehension) of ``triton.Config({...}, num_warps=..., num_stages=...)`` built from literals,
``range`` and module-level names bound to such lists.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from executor.replay_server import ALLOWED_BUILTINS

from .triton_source import KernelReader, _is_jit, parsed_python

_FORBIDDEN = (ast.Import, ast.ImportFrom, ast.Lambda, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef,
              ast.Global, ast.Nonlocal, ast.Try, ast.With, ast.AsyncWith, ast.Yield, ast.YieldFrom, ast.Await,
              ast.Delete, ast.NamedExpr, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)
CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Never an attribute of a replayed body, whatever Triton exports: the routes from Triton's objects
# to Python's (an interpreted tensor's ``handle`` holds its NumPy array).
DENIED_ATTRIBUTES = frozenset({"handle", "data", "os", "sys", "builtins", "subprocess", "importlib", "inspect",
                               "ctypes", "np", "numpy", "torch", "runtime", "compiler", "driver", "knobs", "backends",
                               "tools", "testing", "profiler", "experimental", "interpreter"})


@functools.cache  # it imports triton: once, on first use
def allowed_attributes() -> frozenset[str]:
    """The attribute names a replayed body may use: the public names of Triton's language (its
    functions, tensors, dtypes, constexprs, block pointers, descriptors, ``libdevice``), of
    ``triton`` itself (``jit``, ``cdiv``...) and of ``math``, less ``DENIED_ATTRIBUTES``."""
    import triton
    import triton.language as tl

    spaces: list = [tl, tl.tensor, tl.dtype, tl.constexpr, tl.math, math]
    spaces += [getattr(tl.core, name) for name in ("block_type", "pointer_type", "tensor_descriptor_base", "tuple")
               if hasattr(tl.core, name)]
    try:
        from triton.language.extra import libdevice

        spaces.append(libdevice)
    except ImportError:
        pass
    names = {name for space in spaces for name in dir(space) if not name.startswith("_")}
    names |= {"jit", "cdiv", "next_power_of_2", "language", "extra", "cuda", "libdevice", "constexpr",
              # attributes Triton's types set on their instances
              "element_ty", "primitive_bitwidth", "scalar", "shape", "numel", "name", "value", "type", "dtype",
              "address_space", "fp_mantissa_width", "exponent_bias", "int_bitwidth", "int_signedness", "const"}
    return frozenset(names - DENIED_ATTRIBUTES)


@dataclass
class KernelsOnly:
    """``modules``: {relative path: kernels-only source}; ``kernels``: {(path, name)}; ``autotune``:
    {(path, name): list of configs (``{"kwargs": {...}, "num_warps": ...}``) or None where unreadable};
    ``pruned``: kernels whose autotuner prunes its configs; ``problems``: {(path, name): why it was left out}."""

    modules: dict[str, str] = field(default_factory=dict)
    kernels: set[tuple[str, str]] = field(default_factory=set)
    autotune: dict[tuple[str, str], list[dict] | None] = field(default_factory=dict)
    pruned: set[tuple[str, str]] = field(default_factory=set)
    problems: dict[tuple[str, str], str] = field(default_factory=dict)

    def config_count(self, launched: set[tuple[str, str]] | None = None) -> int:
        """The most configs one autotuned kernel has (of ``launched`` kernels only, if given)."""
        counts = [len(configs) for key, configs in self.autotune.items()
                  if configs and (launched is None or key in launched)]
        return max(counts, default=0)


def _module_name(path: str) -> str:
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` in ``path`` names."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(package + ([node.module] if node.module else []))


class _Reader:
    """One file's reading: its triton/math aliases, constants and kernels."""

    def __init__(self, path: str, tree: ast.Module):
        self.path = path
        self.tree = tree
        self.kernel_reader = KernelReader(tree)
        self.kernel_names = self.kernel_reader.kernels()
        self.modules = set(self.kernel_reader.modules) | {"triton"}
        self.math_names: set[str] = set()
        self.imports: list[ast.stmt] = []
        for node in tree.body:
            if isinstance(node, ast.Import) and all(a.name == "math" or a.name == "triton" or a.name.startswith("triton.")
                                                    for a in node.names):
                self.imports.append(node)
                self.math_names.update(a.asname or a.name for a in node.names if a.name == "math")
            elif isinstance(node, ast.ImportFrom) and not node.level and (
                    (node.module or "").split(".")[0] in ("triton", "math")):
                self.imports.append(node)
        self.import_names = {alias.asname or alias.name.split(".")[0] for node in self.imports for alias in node.names}


def _allowed_expr(node: ast.AST, names: set[str], modules: set[str]) -> bool:
    """Whether a module-level expression is a constant the kernels-only module may keep."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            return False
        if isinstance(sub, ast.Name) and sub.id not in names and sub.id not in modules:
            return False
        if isinstance(sub, ast.Call):
            func = sub.func
            root = func
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in modules):
                return False
        if not isinstance(sub, (ast.Expression, ast.Constant, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare,
                                ast.Tuple, ast.List, ast.Name, ast.Attribute, ast.Call, ast.Load, ast.operator,
                                ast.unaryop, ast.cmpop, ast.boolop, ast.keyword, ast.IfExp)):
            return False
    return True


def _body_problem(function: ast.FunctionDef, names: set[str], attributes: frozenset[str]) -> str | None:
    """Why a kernel body breaks the replay's rule (see the module docstring), or None."""
    local = {arg.arg for arg in function.args.args + function.args.kwonlyargs + function.args.posonlyargs}
    for sub in ast.walk(function):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            local.add(sub.id)
    allowed = names | local | set(ALLOWED_BUILTINS)
    for statement in function.body:
        for sub in ast.walk(statement):
            where = f"line {getattr(sub, 'lineno', function.lineno)}"
            if isinstance(sub, _FORBIDDEN):
                return f"{where}: {type(sub).__name__.lower()} inside a kernel"
            if isinstance(sub, ast.Attribute) and sub.attr not in attributes:
                return f"{where}: the attribute {sub.attr!r}, which is not part of Triton's language"
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in allowed:
                return f"{where}: the name {sub.id!r}, which is neither Triton, math, a parameter, a local, a kernel nor a constant"
    return None


def build(sources: dict[str, str | bytes]) -> KernelsOnly:
    """The kernels-only modules of a submission, from ``{relative path: source}`` of its ``.py`` files."""
    result = KernelsOnly()
    readers = {path: _Reader(path, tree) for path, tree in parsed_python(sources)}
    by_module = {_module_name(path): path for path in readers}
    kept: dict[str, set[str]] = {path: set() for path in readers}  # names each module exports to others
    # constants first (they may be imported by other files' kernels), then kernels
    constants: dict[str, list[ast.stmt]] = {}
    for path, reader in readers.items():
        names = set(reader.import_names)
        kept_here: list[ast.stmt] = []
        for node in reader.tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            if target is None or target in reader.kernel_names:
                continue
            if _allowed_expr(value, names, reader.modules | reader.math_names):
                kept_here.append(ast.Assign(targets=[ast.Name(target, ast.Store())], value=value, lineno=node.lineno))
                names.add(target)
        constants[path] = kept_here
        kept[path] = {stmt.targets[0].id for stmt in kept_here} | set(reader.kernel_names)
    needed: set[str] = set()  # files whose constants a kernel file imports
    for path, reader in readers.items():
        if not reader.kernel_names:
            continue
        body: list[ast.stmt] = list(reader.imports)
        names = set(reader.import_names)
        for node in reader.tree.body:  # names imported from the submission's other kernel files
            if isinstance(node, ast.ImportFrom):
                module = _resolve(path, node)
                other = by_module.get(module)
                if other is None or other == path:
                    continue
                aliases = [alias for alias in node.names if alias.name in kept[other]]
                if aliases:
                    body.append(ast.ImportFrom(module=module, names=aliases, level=0))
                    names.update(alias.asname or alias.name for alias in aliases)
                    needed.add(other)
        body += constants[path]
        names |= {stmt.targets[0].id for stmt in constants[path]}
        names |= reader.kernel_names
        for node in reader.tree.body:
            if isinstance(node, ast.FunctionDef) and reader.kernel_reader.is_kernel(node):
                _keep_kernel(result, reader, path, node, names, body)
            elif isinstance(node, ast.FunctionDef) and node.name in reader.kernel_names:  # name = triton.jit(fn)
                _keep_kernel(result, reader, path, node, names, body)
        if any(isinstance(stmt, ast.FunctionDef) for stmt in body):
            module = ast.Module(body=body, type_ignores=[])
            result.modules[path] = ast.unparse(ast.fix_missing_locations(module)) + "\n"
    for path in sorted(needed - set(result.modules)):  # constants only
        module = ast.Module(body=list(readers[path].imports) + constants[path], type_ignores=[])
        result.modules[path] = ast.unparse(ast.fix_missing_locations(module)) + "\n"
    return result


def _keep_kernel(result: KernelsOnly, reader: _Reader, path: str, node: ast.FunctionDef, names: set[str],
                 body: list[ast.stmt]) -> None:
    key = (path, node.name)
    jit = None
    for decorator in node.decorator_list:
        if _is_jit(decorator, reader.kernel_reader.modules, reader.kernel_reader.jits):
            jit = decorator
        elif isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) \
                and decorator.func.attr == "autotune":
            result.autotune[key] = _read_configs(decorator, reader)
            if any(keyword.arg == "prune_configs_by" for keyword in decorator.keywords):
                result.pruned.add(key)
    problem = _body_problem(node, names, allowed_attributes())
    if problem is not None:
        result.problems[key] = problem
        return
    if jit is None or (isinstance(jit, ast.Call) and not all(
            isinstance(k.value, (ast.Constant, ast.List, ast.Tuple)) for k in jit.keywords)):
        jit = ast.Attribute(ast.Name("triton", ast.Load()), "jit", ast.Load())
    if isinstance(jit, ast.Call):
        jit = ast.Call(jit.func, [], [k for k in jit.keywords if k.arg in ("do_not_specialize", "noinline", "debug")])
    if "triton" not in reader.import_names:
        body.insert(0, ast.Import(names=[ast.alias("triton")]))
        reader.import_names.add("triton")
    kernel = ast.FunctionDef(name=node.name, args=node.args, body=node.body, decorator_list=[jit],
                             returns=None, type_comment=None, lineno=node.lineno)
    body.append(kernel)
    result.kernels.add(key)


# -- reading @triton.autotune(configs=...) without running it ------------------------------


class _Unreadable(Exception):
    pass


def _read_configs(decorator: ast.Call, reader: _Reader) -> list[dict] | None:
    expression = next((k.value for k in decorator.keywords if k.arg == "configs"),
                      decorator.args[0] if decorator.args else None)
    if expression is None:
        return None
    module_values = {}
    for node in reader.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            module_values[node.targets[0].id] = node.value
    try:
        configs = _evaluate(expression, {}, module_values, reader, depth=0)
    except (_Unreadable, TypeError, ValueError, ZeroDivisionError, RecursionError):
        return None
    if not isinstance(configs, list) or not all(isinstance(c, dict) and "kwargs" in c for c in configs):
        return None
    return configs


def _evaluate(node: ast.AST, scope: dict, module_values: dict, reader: _Reader, depth: int):
    if depth > 40:
        raise _Unreadable("too deep")
    ev = lambda n, s=scope: _evaluate(n, s, module_values, reader, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                items.extend(ev(element.value))
            else:
                items.append(ev(element))
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        if node.id in scope:
            return scope[node.id]
        if node.id in module_values:
            return ev(module_values[node.id], {})
        raise _Unreadable(node.id)
    if isinstance(node, ast.BinOp):
        left, right = ev(node.left), ev(node.right)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b, ast.Mod: lambda a, b: a % b,
               ast.Div: lambda a, b: a / b}
        if type(node.op) not in ops or (isinstance(left, list) and isinstance(right, int) and right > 4096):
            raise _Unreadable("operator")
        return ops[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = ev(node.left), ev(node.comparators[0])
        table = {ast.Lt: lambda: left < right, ast.LtE: lambda: left <= right, ast.Gt: lambda: left > right,
                 ast.GtE: lambda: left >= right, ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right,
                 ast.In: lambda: left in right, ast.NotIn: lambda: left not in right}
        if type(node.ops[0]) not in table:
            raise _Unreadable("comparison")
        return table[type(node.ops[0])]()
    if isinstance(node, ast.BoolOp):
        values = [ev(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.IfExp):
        return ev(node.body) if ev(node.test) else ev(node.orelse)
    if isinstance(node, ast.ListComp):
        return _evaluate_list_comprehension(node, scope, ev)
    if isinstance(node, ast.Call):
        return _evaluate_call(node, ev)
    raise _Unreadable(type(node).__name__)


def _evaluate_list_comprehension(node: ast.ListComp, scope: dict, ev) -> list:
    """``[elt for ... in ... if ...]``, each part read by ``ev(node, scope)`` (at most 4096 items)."""
    results: list = []

    def loop(index: int, inner: dict) -> None:
        if index == len(node.generators):
            results.append(ev(node.elt, inner))
            if len(results) > 4096:
                raise _Unreadable("too many configs")
            return
        generator = node.generators[index]
        for item in ev(generator.iter, inner):
            bound = dict(inner)
            _bind(generator.target, item, bound)
            if all(ev(condition, bound) for condition in generator.ifs):
                loop(index + 1, bound)
    loop(0, dict(scope))
    return results


def _evaluate_call(node: ast.Call, ev):
    """A call of ``triton.Config`` (as a dict) or of one of a few pure builtins, its arguments read by ``ev``."""
    name = _call_name(node.func)
    args = [ev(a) for a in node.args]
    kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg is not None}
    if name == "Config":
        meta = args[0] if args else kwargs.pop("kwargs", {})
        if not isinstance(meta, dict):
            raise _Unreadable("Config")
        config = {"kwargs": dict(meta)}
        for index, field_name in enumerate(CONFIG_FIELDS):
            value = args[index + 1] if len(args) > index + 1 else kwargs.get(field_name)
            if value is not None:
                config[field_name] = value
        return config
    if name == "range":
        return list(range(*args))
    if name == "dict":
        return dict(*args, **kwargs)
    if name in ("list", "tuple"):
        return list(*args) if name == "list" else tuple(*args)
    if name == "product":
        return [tuple(p) for p in itertools.product(*args)]
    if name in ("pow", "max", "min"):
        return {"pow": pow, "max": max, "min": min}[name](*args)
    if name in ("log2", "sqrt") and args:
        return getattr(math, name)(*args)
    raise _Unreadable(f"call of {name}")


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _bind(target: ast.AST, value, scope: dict) -> None:
    if isinstance(target, ast.Name):
        scope[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = list(value)
        if len(values) != len(target.elts):
            raise _Unreadable("unpacking")
        for element, item in zip(target.elts, values):
            _bind(element, item, scope)
    else:
        raise _Unreadable("target")
