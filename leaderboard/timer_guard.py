"""Run in the worker, beside the submission: timers captured before it is imported, and the check
that nothing was patched.

Staff read this file to know how the leaderboard defends its clocks. The submission runs in the
same process as the timing (it has to: its tensors live in that process), so before importing
it the worker keeps its own references to every timer and synchronisation it uses, and records
what a watched set of names points to. After the import, after the correctness checks and after
the timing, ``check_untampered`` refuses if any of those names now points elsewhere (a wrapped
``time.perf_counter``, a ``torch.cuda.Event.elapsed_time`` that halves, a replaced
``triton.testing.do_bench``, a new ``torch.Tensor.backward``) or if a global torch function or
dispatch mode was left active. This stops monkeypatching inside the worker; code that patches the
interpreter or the CUDA driver itself is bounded by the parent's checks (``verdict``: the
timing brackets, the floor it measures itself, correctness on its own inputs).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from leaderboard.detectors import Refusal

# Module functions the timing loop (``timing``) calls, directly or through triton.testing.do_bench.
WATCHED_MODULE_NAMES = {
    "time": ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "sleep"),
    "statistics": ("median", "mean"),
    "torch": ("randn", "randn_like", "empty", "empty_like", "ones_like", "zeros_like", "equal", "matmul", "compile", "manual_seed"),
    "torch.autograd": ("backward", "grad", "Function"),
    "torch.cuda": ("synchronize", "Event", "Stream", "current_stream", "default_stream", "stream", "set_stream", "is_available"),
    "triton.testing": ("do_bench", "do_bench_cudagraph"),
}
# Classes whose whole namespace is watched: a method replaced or added is a patch.
WATCHED_CLASSES = ("torch.Tensor", "torch._C.TensorBase", "torch.cuda.Event", "torch.autograd.Function")
# Global modes a submission may leave on: torch.set_default_device installs this one.
ALLOWED_FUNCTION_MODES = ("DeviceContext",)


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _class_namespace(cls: type) -> dict[str, Any]:
    skip = {"__doc__", "__dict__", "__weakref__", "__module__", "__annotations__", "__parameters__"}
    return {name: value for name, value in vars(cls).items() if name not in skip}


@dataclass
class Snapshot:
    """What each watched name pointed to when the snapshot was taken (strong references)."""

    names: dict[str, Any]
    class_keys: dict[str, frozenset[str]]


def snapshot() -> Snapshot:
    """Record the watched names; call before importing the submission."""
    names: dict[str, Any] = {}
    class_keys: dict[str, frozenset[str]] = {}
    for module_name, attrs in WATCHED_MODULE_NAMES.items():
        module = _resolve(module_name)
        for attr in attrs:
            if hasattr(module, attr):
                names[f"{module_name}.{attr}"] = getattr(module, attr)
    for class_name in WATCHED_CLASSES:
        try:
            cls = _resolve(class_name)
        except (ImportError, AttributeError):
            continue
        namespace = _class_namespace(cls)
        class_keys[class_name] = frozenset(namespace)
        for attr, value in namespace.items():
            names[f"{class_name}.{attr}"] = value
    return Snapshot(names, class_keys)


def active_modes() -> list[str]:
    """Names of global torch function and dispatch modes that are active now."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    modes = [type(m).__name__ for m in _get_current_function_mode_stack()]
    modes = [m for m in modes if m not in ALLOWED_FUNCTION_MODES]
    return modes + [type(m).__name__ for m in _get_current_dispatch_mode_stack()]


def find_patches(before: Snapshot) -> list[str]:
    """Watched names that now point somewhere else, methods added to watched classes, and
    active global modes, each as a short description."""
    found: list[str] = []
    current_values: dict[str, Any] = {}
    for module_name, attrs in WATCHED_MODULE_NAMES.items():
        module = _resolve(module_name)
        for attr in attrs:
            if hasattr(module, attr):
                current_values[f"{module_name}.{attr}"] = getattr(module, attr)
    for class_name, keys in before.class_keys.items():
        namespace = _class_namespace(_resolve(class_name))
        for attr in sorted(set(namespace) - keys):
            found.append(f"{class_name}.{attr} was added")
        for attr, value in namespace.items():
            current_values[f"{class_name}.{attr}"] = value
    for name, original in before.names.items():
        if name not in current_values:
            found.append(f"{name} was removed")
        elif current_values[name] is not original:
            found.append(f"{name} was replaced")
    found += [f"a global {mode} is active" for mode in active_modes()]
    return found


def check_untampered(before: Snapshot, when: str) -> Refusal | None:
    """Refuse if anything watched changed since ``before`` (``when`` says at which step)."""
    found = find_patches(before)
    if not found:
        return None
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return Refusal(
        "patched_timers",
        f"{when}: {shown}. The leaderboard's timers, synchronisation and torch functions must be "
        "left as they are.",
    )


@dataclass(frozen=True)
class CapturedClock:
    """The clocks the worker uses, captured before any submission code runs.

    ``synchronize`` waits for all work on the device (every stream); ``do_bench`` and ``Event``
    are None without CUDA.
    """

    perf_counter: Callable[[], float]
    synchronize: Callable[[], None]
    do_bench: Callable[..., Any] | None
    Event: type | None
    median: Callable[[list[float]], float]


def capture_clock(cuda: bool) -> CapturedClock:
    """Keep references to the timers now, before the submission can replace them."""
    if cuda:
        import triton.testing

        return CapturedClock(time.perf_counter, torch.cuda.synchronize, triton.testing.do_bench, torch.cuda.Event, statistics.median)
    return CapturedClock(time.perf_counter, lambda: None, None, None, statistics.median)

