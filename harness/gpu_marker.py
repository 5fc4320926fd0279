"""The ``gpu`` marker: how many CUDA GPUs a test needs, and how many this machine has.

``@pytest.mark.gpu`` marks a test that needs one CUDA GPU; ``@pytest.mark.gpu(count=2)`` one
that needs two (a process per GPU over NCCL). Read by conftest.py, which skips a test this
machine has too few GPUs for, and by the scorers (tests/score.py, the grader's plugin and
runner): a test skipped for want of GPUs is "not graded on this runner", never a failure, so
a one-GPU runner costs no points on two-GPU tests. How many GPUs there are is harness/gpus.py's
``count()``.
"""

from __future__ import annotations

SKIP_REASON = "needs a CUDA GPU"
"""The start of every skip reason of a test with too few GPUs."""


def gpus_needed(item) -> int:
    """How many CUDA GPUs the pytest ``item`` needs: 0 without the ``gpu`` marker."""
    marker = item.get_closest_marker("gpu")
    if marker is None:
        return 0
    return int(marker.kwargs.get("count", marker.args[0] if marker.args else 1))


def skip_reason(needed: int, present: int) -> str:
    """Why a test that needs ``needed`` GPUs is skipped on a machine with ``present`` (always starts with SKIP_REASON)."""
    if needed == 1:
        return f"{SKIP_REASON} (none found on this machine)"
    return f"{SKIP_REASON} per process: {needed} GPUs (found {present} on this machine)"


def not_graded_message(needed: int, present: int) -> str:
    """The verdict's text for a test this runner cannot grade: it is graded where there are enough GPUs."""
    if present == 0:
        return ("not graded on this runner: this test needs a CUDA GPU, and this grader has none; it is graded "
                "on a GPU runner")
    return (f"not graded on this runner: this test needs {needed} CUDA GPUs, and this grader has {present}; it "
            f"is graded on a runner with {needed}")
