"""The harness: the trusted pytest process the grader starts for each test run, with its plugin.

Started by autograder/watchdog.py as ``python -I -B harness_pytest.py KIT KEY_FD RECORD_FD
RUN_ONLY -- PYTEST_ARGS...`` (RUN_ONLY is "-" when unused). This process is the harness: it
never imports the submission, which runs in the executor that the kit's conftest starts for
``--isolate`` (executor/). ``-I``
keeps PYTHONPATH, user site-packages and the current directory off ``sys.path``; the kit
root is put there explicitly (and the grader's own root after it, when a selftest grades
against a toy kit), so that ``tests``, ``conftest`` and ``autograder`` are always the kit's
own, never files from the submission.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

# The harness's own memory limit (data segment: heap and private writable mappings; CUDA's
# address-space reservations are not counted, so GPU runners keep it). With the reply-frame
# limits of harness/client.py a harness needs well under 2 GiB; this bounds what a bug
# or a hostile executor could make it hold, so that concurrent grades on one host survive.
HARNESS_MEMORY_BYTES = int(os.environ.get("CS336_HARNESS_MEMORY_BYTES", 16 << 30))


def limit_memory() -> None:
    """Cap this process's data segment at HARNESS_MEMORY_BYTES (soft and hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    value = HARNESS_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(HARNESS_MEMORY_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (value, value))


def main(argv: list[str]) -> int:
    kit, key_fd, record_fd, run_only, separator, *pytest_args = argv
    if separator != "--":
        raise SystemExit("usage: harness_pytest.py KIT KEY_FD RECORD_FD RUN_ONLY -- PYTEST_ARGS...")
    try:  # if the machine runs out of memory, the kernel should kill a test process, not the grader
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass
    limit_memory()
    grader_root = str(Path(__file__).resolve().parent.parent)
    sys.path[:0] = [kit] if kit == grader_root else [kit, grader_root]

    import pytest

    from autograder.gpu_quiet import from_environment
    from autograder.pytest_plugin import GraderPlugin, load_selection

    nodeids, pool = load_selection(None if run_only == "-" else run_only)
    plugin = GraderPlugin(key_fd=int(key_fd), record_fd=int(record_fd), run_only=nodeids, pool=pool,
                          gpu_quiet=from_environment())
    return int(pytest.main(pytest_args, plugins=[plugin]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
