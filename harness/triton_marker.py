"""The ``triton`` marker: tests that run your Triton kernels, and what happens where Triton is missing.

Triton publishes wheels for Linux only, so on macOS and Windows ``setup.sh`` installs everything
but Triton. Read by conftest.py: where ``import triton`` fails, every test marked ``triton`` is
skipped, and the run ends with one note (``HOW_TO_RUN``) that says where those tests can run.
Read by tests/score.py too, which counts such a test as "not graded here", never as a failure:
the grader runs it (on Linux, where Triton is installed).
"""

from __future__ import annotations

import functools

SKIP_REASON = "needs Triton, which is not installed here (see the note 'Triton tests skipped')"
"""The skip reason of every test marked ``triton`` on a machine without Triton."""

HOW_TO_RUN = """\
Triton publishes builds for Linux only, so on this machine `setup.sh` installed everything but
Triton, and the {count} tests that run your Triton kernels were skipped (the rest ran as usual).
To run them, use Linux; no GPU is needed (they run in Triton's interpreter on a CPU):
  * the Linux container that comes with the assignment (.devcontainer/; README.md, "On macOS or
    Windows"): in VS Code, "Reopen in Container"; with Docker alone, from this folder,
      docker build -t cs336-systems -f .devcontainer/Dockerfile .
      docker run --rm -v "$PWD":/assignment cs336-systems
  * or upload submission.zip to Gradescope: its CPU runner runs every test, Triton's included."""
"""The one note a run prints when it skipped Triton tests (``count``: how many)."""


def needs_triton(item) -> bool:
    """Whether the pytest ``item`` runs Triton kernels (it carries the ``triton`` marker)."""
    return item.get_closest_marker("triton") is not None


@functools.cache
def triton_importable() -> bool:
    """Whether ``import triton`` works in this process (it is imported once, here, if so)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
