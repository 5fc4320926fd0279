"""Detect student code that patches the test harness from inside the test process.

Read by the grader's pytest plugin. Student code runs in the same process as the tests, so it
could replace ``torch.allclose``, ``torch.testing.assert_close``, the assertion helpers in
``tests/``, pytest's own runner, or push a ``TorchFunctionMode`` that rewrites every tensor
operation the tests do. None of that can be prevented in-process, but all of it leaves a
trace: an object or a code object that is no longer the one there was before any student
code ran. The guard photographs those objects after collection (before student code is
imported) and compares after every test; a test after which anything differs is failed.

What it photographs:
- our own code in full: the test modules (``tests.*``, ``autograder.*``) and their classes;
- pytest, pluggy and Hypothesis's runner in full (module functions, classes and their methods);
- ``builtins``, ``math``, ``operator``, ``hmac``, ``json`` in full;
- the comparison surface of torch and numpy: ``torch.testing``, a list of torch functions
  used to compare tensors, every method of ``torch.Tensor``, and ``numpy.testing``;
- ``sys.modules`` entries of all of the above, and the trace and profile hooks;
- the subclasses of ``torch.Tensor``, ``numpy.ndarray`` and the built-in value types (float,
  int, str, list, dict, tuple...): a new subclass of a tensor type whose methods were written
  outside the installed libraries and the kit, or a new subclass of a value type whose
  comparison or conversion methods were, fails the test it appeared in. That is how a
  "result" that answers every comparison with "equal" (a float whose ``__eq__`` is always
  True, a tensor that rewrites the test's arithmetic through ``__torch_function__``) is caught.

Only objects present at photograph time are compared: modules that appear later, and
attributes that torch adds lazily (``torch._dynamo``...), are not reported.
"""

from __future__ import annotations

import sys
import threading
import types

_FULL_PREFIXES = (
    "tests",
    "autograder",
    "conftest",
    "_pytest",
    "pytest",
    "pluggy",
    "hypothesis.core",
    "hypothesis.internal.conjecture.engine",
    "hypothesis.internal.escalation",
)
_FULL_MODULES = ("builtins", "math", "operator", "hmac", "json", "numpy.testing", "torch.testing")
_TORCH_FUNCTIONS = (
    "abs", "all", "allclose", "any", "amax", "amin", "as_tensor", "clone", "count_nonzero",
    "dist", "empty_like", "eq", "equal", "isclose", "isfinite", "isinf", "isnan", "le", "lt",
    "ge", "gt", "max", "maximum", "min", "minimum", "ne", "norm", "randn", "rand", "sub",
    "sum", "tensor", "where", "zeros", "ones", "is_tensor", "from_numpy",
)
_NUMPY_FUNCTIONS = ("allclose", "isclose", "array_equal", "abs", "max", "asarray", "array")


def _code_of(value):
    function = value
    if isinstance(value, (staticmethod, classmethod)):
        function = value.__func__
    if isinstance(function, property):
        function = function.fget
    return getattr(function, "__code__", None)


def _is_watched(value) -> bool:
    return isinstance(
        value,
        (
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodType,
            types.WrapperDescriptorType,
            types.MethodDescriptorType,
            types.MethodWrapperType,
            staticmethod,
            classmethod,
            property,
            type,
        ),
    )


_VALUE_TYPES = (float, int, complex, str, bytes, list, tuple, dict, set, frozenset)
_LYING_METHODS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__float__", "__int__",
    "__index__", "__len__", "__iter__", "__getitem__", "__contains__", "__abs__", "__neg__", "__add__", "__radd__",
    "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__round__", "__format__",
    "__array__", "__array_ufunc__", "__array_function__", "__torch_function__", "__torch_dispatch__",
    "__instancecheck__", "__subclasscheck__", "__getattribute__", "__getattr__",
})


def _all_subclasses(cls: type) -> list[type]:
    found, stack = [], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            found.append(sub)
            stack.append(sub)
    return found


class TamperGuard:
    """A photograph of the harness; ``changes()`` lists what differs from it now.

    ``trusted_roots`` are folders whose code may define new torch.Tensor subclasses at any
    time (the installed libraries and the kit); code anywhere else may not.
    """

    def __init__(self, trusted_roots: tuple[str, ...] = ()) -> None:
        self._trusted_roots = tuple(trusted_roots)
        self._known_subclasses: set[int] = set()
        self._bases: list[tuple[type, bool]] = []  # (base, any untrusted method counts)
        self._entries: list[tuple[str, object, str, object, object]] = []
        self._modules: dict[str, types.ModuleType] = {}
        self._trace = (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())

    # -- taking the photograph --------------------------------------------------------

    def _watch(self, label: str, namespace: dict, names=None) -> None:
        for name in names if names is not None else list(namespace):
            value = namespace.get(name)
            if value is None or not _is_watched(value):
                continue
            self._entries.append((f"{label}.{name}", namespace, name, value, _code_of(value)))

    def _watch_class(self, label: str, cls: type) -> None:
        try:
            namespace = cls.__dict__
        except AttributeError:
            return
        for name, value in list(namespace.items()):
            if _is_watched(value) and not isinstance(value, type):
                self._entries.append((f"{label}.{name}", namespace, name, value, _code_of(value)))

    def photograph(self) -> "TamperGuard":
        """Record the current harness; call before any student code is imported."""
        for module_name, module in list(sys.modules.items()):
            if not isinstance(module, types.ModuleType):
                continue
            full = module_name in _FULL_MODULES or any(
                module_name == prefix or module_name.startswith(prefix + ".") for prefix in _FULL_PREFIXES
            )
            if module_name.startswith("autograder.fixtures"):
                continue
            if not full:
                continue
            self._modules[module_name] = module
            self._watch(module_name, vars(module))
            for value in list(vars(module).values()):
                if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                    self._watch_class(f"{module_name}.{value.__name__}", value)
        torch = sys.modules.get("torch")
        if torch is not None:
            self._modules["torch"] = torch
            self._watch("torch", vars(torch), _TORCH_FUNCTIONS)
            self._watch_class("torch.Tensor", torch.Tensor)
            self._watch_class("torch._C.TensorBase", torch._C.TensorBase)
            self._torch_modes = self._torch_mode_depth(torch)

        numpy = sys.modules.get("numpy")
        if numpy is not None:
            self._modules["numpy"] = numpy
            self._watch("numpy", vars(numpy), _NUMPY_FUNCTIONS)
        self._bases = [(base, False) for base in _VALUE_TYPES]
        if torch is not None:
            self._bases.append((torch.Tensor, True))
        if numpy is not None:
            self._bases.append((numpy.ndarray, True))
        for base, _ in self._bases:
            self._known_subclasses.update(id(cls) for cls in _all_subclasses(base))
        return self

    @staticmethod
    def _torch_mode_depth(torch) -> tuple[int, int]:
        try:
            return (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
        except AttributeError:
            return (0, 0)

    # -- comparing --------------------------------------------------------------------

    def changes(self, limit: int = 5) -> list[str]:
        """What differs from the photograph (at most ``limit`` items); empty when nothing does."""
        found: list[str] = []
        for name, module in self._modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}] was replaced")
        for label, namespace, name, value, code in self._entries:
            if len(found) >= limit:
                break
            now = namespace.get(name)
            if now is not value:
                found.append(f"{label} was replaced")
            elif code is not None and _code_of(now) is not code:
                found.append(f"the code of {label} was replaced")
        trace = (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())
        if trace != self._trace:
            found.append("a trace or profile hook was installed (sys.settrace / sys.setprofile)")
        torch = self._modules.get("torch")
        if torch is not None and self._torch_mode_depth(torch) != self._torch_modes:
            found.append("a TorchFunctionMode or TorchDispatchMode was left active")
        for base, any_method in self._bases:
            for cls in _all_subclasses(base):
                if id(cls) in self._known_subclasses:
                    continue
                where = self._untrusted_code(cls, any_method)
                if where is None:
                    self._known_subclasses.add(id(cls))
                else:
                    found.append(f"submitted code defined {cls.__qualname__}, a subclass of {base.__name__} with its "
                                 f"own {where}; return plain {base.__name__} values")
        return found[:limit]

    def _untrusted_code(self, cls: type, any_method: bool) -> str | None:
        """'method (file)' of ``cls`` written outside the trusted roots that could lie in a comparison, or None."""
        for name, value in vars(cls).items():
            if not any_method and name not in _LYING_METHODS:
                continue
            code = _code_of(value)
            if code is not None and not code.co_filename.startswith(self._trusted_roots):
                return f"{name} ({code.co_filename})"
        return None

