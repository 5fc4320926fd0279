"""How many CPUs this process may really use: for sizing the grade's jobs and threads.

Read by the grader (autograder/grade.py sizes its jobs and threads with it) and staff sizing a runner. ``os.cpu_count()`` counts the host's CPUs, which in a container
(a Gradescope runner, a Slurm job) can be many more than the process may run on. The usable
count is the smaller of the CPUs in this process's affinity mask (``os.sched_getaffinity``)
and the cgroup's CPU quota, rounded up: cgroup v2's ``cpu.max`` ("QUOTA PERIOD", or "max") or
cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: no quota).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP, proc_cgroup: str | None = None) -> float | None:
    """The CPUs this process's cgroup may use (1.5 for "150000 100000"), from its CPU quota at the
    tightest level between its own cgroup and the root; None when there is none or it cannot be read.
    ``proc_cgroup``: the text of /proc/self/cgroup (read when None)."""
    try:
        lines = (proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()).splitlines()
    except OSError:
        lines = []
    candidates: list[tuple[Path, str]] = []  # (folder, "v2" or "v1")
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        relative = path.lstrip("/")
        levels = [relative, *map(str, Path(relative).parents)] if relative else [""]
        if hierarchy == "0" and controllers == "":
            candidates += [(root / level, "v2") for level in levels]
        elif "cpu" in controllers.split(","):
            candidates += [(base / level, "v1") for base in (root / "cpu,cpuacct", root / "cpu") for level in levels]
    limits = []
    for folder, version in candidates:
        try:
            if version == "v2":
                quota, period = (folder / "cpu.max").read_text().split()[:2]
                if quota != "max":
                    limits.append(int(quota) / int(period))
            else:
                quota = int((folder / "cpu.cfs_quota_us").read_text())
                period = int((folder / "cpu.cfs_period_us").read_text())
                if quota > 0 and period > 0:
                    limits.append(quota / period)
        except (OSError, ValueError):
            continue
    return min(limits) if limits else None


def usable_cpus(root: Path = CGROUP, proc_cgroup: str | None = None) -> int:
    """CPUs this process may use: min(its affinity, ceil(the cgroup quota)), at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root, proc_cgroup)
    if limit is not None:
        count = min(count, max(1, math.ceil(limit - 1e-9)))
    return max(1, count)
