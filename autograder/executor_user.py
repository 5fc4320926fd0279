"""The executor's user: what the unprivileged user id that runs a submission may read and use.

Read by staff who change how a grade isolates the submission (autograder/grade.py, step 2). As
root, a grade leases a user id per test process (confine/uid_pool.py); before the first one
runs it checks here that such a user can read the Python and packages the tests need (each
executor covers closed directories on the way with views, confine/views.py; else the grade is
refused), makes the staff files readable by root only, and sets the limits each executor runs under.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import gpus

STAFF_ONLY = (Path("autograder") / "hidden_tests", Path("fixtures"), Path("reference"))
# Per executor (the process that runs the submission), set so that the reference passes with room
# to spare: measured peaks are in autograder/README.md. The address-space limit applies only where
# CUDA is absent (CUDA reserves far more address space than it uses).
EXECUTOR_LIMITS = {"as_bytes": 8 << 30, "cpu_s": 3600, "fsize_bytes": 2 << 30, "nproc": 1024}


def protect_staff_files(kit: Path) -> None:
    """Make the hidden tests, the fixtures and the reference unreadable by anyone but root.

    The hidden tests' folders stay traversable (0711), so that pytest, having imported them as
    root, can still ``stat`` them after dropping privileges; their files are 0600.
    """
    for relative in STAFF_ONLY:
        path = kit / relative
        if not path.exists():
            continue
        if relative == STAFF_ONLY[0]:
            for sub in [path, *path.rglob("*")]:
                sub.chmod(0o711 if sub.is_dir() else 0o600)
        else:
            path.chmod(0o700)


def executor_limits() -> dict[str, int | None]:
    """EXECUTOR_LIMITS for this machine: no address-space limit where CUDA runs, no process limit unless root."""
    limits = dict(EXECUTOR_LIMITS)
    if gpus.driver_present():
        limits["as_bytes"] = None
    if os.geteuid() != 0:
        limits["nproc"] = None  # it would count every process of this user, not only the executor's
    return limits
