"""Profiler checks: no library attention anywhere, and the forward's GPU time mostly in the
submission's own Triton kernels.

Staff read this file to know how "Triton, not SDPA / cuDNN / flash-attn / FlexAttention /
torch.compile" is enforced. One call is profiled with ``torch.profiler`` in the worker, and two
things are read from it:

* Operator names recorded by the dispatcher on the host (``aten::...``). Any of PyTorch's
  attention operators (``scaled_dot_product_attention`` and its flash, memory-efficient, cuDNN
  and math variants) is refused. This part works on a CPU too.
* GPU kernel names and durations. A kernel is the **submission's Triton** only when its name is
  that of a ``@triton.jit`` function (autotuned or not) defined in the submission's own files
  (``adapters.py`` and ``cs336_systems/**/*.py``), as the parent finds them by parsing its own
  copy of those files (``submission_triton_names``, the grader's reading in
  ``harness/triton_source.py``); torch.compile may append
  ``_<n>``. Kernels that Triton compiles for libraries, FlexAttention (``triton_tem_...``) and
  torch.compile's generated code (``triton_poi_...``, ``triton_per_...``) do not count, and a
  submission's function named ``triton_...`` or like a library kernel (``gemm``, ``xmma``,
  ``cutlass``, ...) does not count either: it could only be there to borrow that name.
  A non-Triton kernel whose name looks like attention (flash, fmha, sdpa, cudnn, attn) is
  refused; and the submission's Triton kernels must take at least half of the forward's GPU
  time. The backward is exempt from that share, because a PyTorch backward compiled with
  torch.compile (whose matrix products run in cuBLAS) is an honest solution to §2.5.

Without a GPU (``--cpu``) there are no GPU kernels; the worker records which ``@triton.jit``
functions Triton's interpreter launched during the profiled forward, and at least one of them
must be the submission's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch

from leaderboard.detectors import Refusal
from harness.triton_source import kernels_in_sources

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


# A submission's kernel with such a name could only be borrowing a generated or library kernel's.
BORROWED_NAMES = re.compile(r"^triton_|gemm|xmma|cublas|cutlass|cudnn|nvjet|^sm\d+_|^(ampere|hopper|volta|turing)_", re.IGNORECASE)


def submission_triton_names(sources: dict[str, bytes]) -> set[str]:
    """Names of the ``@triton.jit`` functions defined in a submission's files.

    ``sources`` maps each file's relative path to its bytes (the parent's own copy). What counts
    as a kernel is the grader's reading (``harness/triton_source.py``); names
    ``BORROWED_NAMES`` matches are left out.
    """
    names = set().union(*kernels_in_sources(sources).values())
    return {name for name in names if not BORROWED_NAMES.search(name)}


def is_triton_kernel(kernel: str, triton_names: set[str]) -> bool:
    """Whether a GPU kernel is one of the submission's Triton kernels: its name is one of
    ``triton_names`` (from ``submission_triton_names``), possibly with ``_<n>`` appended."""
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


def check_triton_launched(launched: list[str], triton_names: set[str]) -> Refusal | None:
    """Without a GPU: refuse when none of the ``@triton.jit`` functions that Triton's interpreter
    launched during the forward is one of the submission's."""
    own = sorted({name for name in launched if name in triton_names})
    if own:
        return None
    ran = ", ".join(sorted(set(launched))[:4]) or "none"
    return Refusal(
        "not_triton",
        f"no Triton kernel defined in the submission ran in the forward (Triton kernels launched: {ran}; "
        f"defined in the submission: {', '.join(sorted(triton_names)[:6]) or 'none'}). Write the forward "
        "as your own @triton.jit kernels.",
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
        f"the submission's own Triton kernels took {triton:.0f} of {total:.0f} us of the forward's GPU "
        f"time (below {min_share:.0%}); largest kernels: {top}. Write the forward as your own "
        "@triton.jit kernels (FlexAttention's and torch.compile's generated kernels do not count).",
    )


def top_kernels(events: list[ProfiledEvent], n: int = 8) -> list[tuple[str, float]]:
    """The ``n`` GPU kernels with the most total time, as (name, microseconds)."""
    totals: dict[str, float] = {}
    for e in events:
        if e.on_gpu:
            totals[e.name] = totals.get(e.name, 0.0) + e.duration_us
    return sorted(totals.items(), key=lambda item: -item[1])[:n]


def summarize_events(events) -> list[list]:
    """Profiler events as [name, on_gpu, total microseconds, count], one row per (name, on_gpu)."""
    rows: dict[tuple[str, bool], list] = {}
    for e in events:
        row = rows.setdefault((e.name, e.on_gpu), [e.name, e.on_gpu, 0.0, 0])
        row[2] += e.duration_us
        row[3] += 1
    return list(rows.values())
