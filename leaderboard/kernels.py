"""Profiler checks: no library attention anywhere, and the forward's GPU time mostly in Triton.

Staff read this file to know how "Triton, not SDPA / cuDNN / flash-attn" is enforced. One call
is profiled with ``torch.profiler``, and two things are read from it:

* Operator names recorded by the dispatcher on the host (``aten::...``). Any of PyTorch's
  attention operators (``scaled_dot_product_attention`` and its flash, memory-efficient, cuDNN
  and math variants) is refused. This part works on a CPU too.
* GPU kernel names and durations. A kernel is Triton's when its name is that of a
  ``@triton.jit`` function loaded in the process (inductor may append ``_<n>``) or starts with
  ``triton_`` (kernels torch.compile generates). A non-Triton kernel whose name looks like
  attention (flash, fmha, sdpa, cudnn, attn) is refused; and Triton kernels must take at least
  half of the forward's GPU time. The backward is exempt from that share, because a PyTorch
  backward compiled with torch.compile (whose matrix products run in cuBLAS) is an honest
  solution to §2.5.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass
from typing import Callable

import torch

from leaderboard.detectors import Refusal

ATTENTION_OPS = re.compile(
    r"^aten::_?(scaled_dot_product|flash_attention|efficient_attention|cudnn_attention|fused_sdp|_fused_sdp)", re.IGNORECASE
)
ATTENTION_KERNELS = re.compile(r"flash|fmha|sdpa|cudnn|attn|attention", re.IGNORECASE)


@dataclass(frozen=True)
class ProfiledEvent:
    """One profiler event: an operator on the host or a kernel (or copy) on the GPU."""

    name: str
    on_gpu: bool
    duration_us: float


def profile_call(fn: Callable[[], object], synchronize: Callable[[], None], cuda: bool) -> list[ProfiledEvent]:
    """Run ``fn`` once under torch.profiler and return its host operators and GPU kernels."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize()
    with profile(activities=activities) as prof:
        fn()
        synchronize()
    gpu = {torch.autograd.DeviceType.CUDA}
    return [ProfiledEvent(e.name, e.device_type in gpu, float(e.time_range.elapsed_us())) for e in prof.events()]


# Objects that hold the name of a kernel Triton compiled: the compiled kernel itself, and the
# wrappers torch.compile uses to launch Triton kernels without Triton's launcher.
COMPILED_KERNEL_TYPES = ("CompiledKernel", "StaticallyLaunchedTritonKernel", "StaticallyLaunchedCudaKernel")


def triton_function_names() -> set[str]:
    """Names of every Triton kernel in this process: each ``@triton.jit`` function (compiled or
    interpreted) and each kernel Triton compiled, found by walking the garbage collector's objects."""
    from triton.runtime.jit import JITFunction

    kinds: tuple[type, ...] = (JITFunction,)
    try:
        from triton.runtime.interpreter import InterpretedFunction

        kinds += (InterpretedFunction,)
    except ImportError:
        pass
    names = set()
    for obj in gc.get_objects():
        # type(), not isinstance(): the latter consults __class__, which dead weak proxies and
        # deprecated lazy objects answer with errors or warnings.
        kind = type(obj)
        if issubclass(kind, kinds):
            name = getattr(getattr(obj, "fn", None), "__name__", None)
        elif kind.__name__ in COMPILED_KERNEL_TYPES:
            name = getattr(obj, "name", None)
        else:
            continue
        if isinstance(name, str) and name:
            names.add(name)
    return names


def is_triton_kernel(kernel: str, triton_names: set[str]) -> bool:
    """Whether a GPU kernel name is a Triton kernel's (see the module docstring)."""
    if kernel.startswith("triton_"):
        return True
    match = re.fullmatch(r"(.+?)(_\d+)?", kernel)
    return kernel in triton_names or (match is not None and match.group(1) in triton_names)


def check_library_attention(events: list[ProfiledEvent], triton_names: set[str]) -> Refusal | None:
    """Refuse PyTorch attention operators, and non-Triton kernels named like attention."""
    ops = sorted({e.name for e in events if not e.on_gpu and ATTENTION_OPS.search(e.name)})
    kernels = sorted(
        {e.name for e in events if e.on_gpu and ATTENTION_KERNELS.search(e.name) and not is_triton_kernel(e.name, triton_names)}
    )
    if not ops and not kernels:
        return None
    found = [f"operator {name}" for name in ops] + [f"kernel {name[:120]}" for name in kernels]
    return Refusal(
        "library_attention",
        f"library attention ran: {'; '.join(found[:4])}. The leaderboard times your own Triton "
        "kernels; do not call scaled_dot_product_attention, cuDNN or flash-attn.",
    )


def triton_share(events: list[ProfiledEvent], triton_names: set[str]) -> tuple[float, float]:
    """(Triton kernel time, all GPU time) in microseconds."""
    total = sum(e.duration_us for e in events if e.on_gpu)
    triton = sum(e.duration_us for e in events if e.on_gpu and is_triton_kernel(e.name, triton_names))
    return triton, total


def check_triton_share(events: list[ProfiledEvent], triton_names: set[str], min_share: float) -> Refusal | None:
    """Refuse when Triton kernels take less than ``min_share`` of the (forward's) GPU time."""
    triton, total = triton_share(events, triton_names)
    if total <= 0 or triton >= min_share * total:
        return None
    top = ", ".join(f"{name[:60]} {us:.0f} us" for name, us in top_kernels(events)[:3])
    return Refusal(
        "not_triton",
        f"Triton kernels took {triton:.0f} of {total:.0f} us of the forward's GPU time "
        f"(below {min_share:.0%}); largest kernels: {top}. Write the forward as Triton kernels.",
    )


def top_kernels(events: list[ProfiledEvent], n: int = 8) -> list[tuple[str, float]]:
    """The ``n`` GPU kernels with the most total time, as (name, microseconds)."""
    totals: dict[str, float] = {}
    for e in events:
        if e.on_gpu:
            totals[e.name] = totals.get(e.name, 0.0) + e.duration_us
    return sorted(totals.items(), key=lambda item: -item[1])[:n]
