"""How many CPUs this process may really use: for sizing the grade's jobs and threads.

Read by staff sizing a runner. ``os.cpu_count()`` counts the host's CPUs, which in a container
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


def _quota_v2(text: str) -> float | None:
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return int(parts[0]) / int(parts[1])


def cgroup_cpu_limit(root: Path = CGROUP, proc_cgroup: str | None = None) -> float | None:
    """The cgroup's CPU quota in CPUs (1.5 for "150000 100000"), or None when there is none or it cannot be read."""
    try:
        lines = (proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()).splitlines()
    except OSError:
        lines = []
    for line in lines:  # cgroup v2: "0::/path"
        if line.startswith("0::"):
            relative = line[3:].lstrip("/")
            folder = root / relative if relative else root
            while True:  # the tightest quota on the way up counts; walk to the root
                try:
                    quota = _quota_v2((folder / "cpu.max").read_text())
                except (OSError, ValueError):
                    quota = None
                if quota is not None:
                    return quota
                if folder == root or root not in folder.parents:
                    break
                folder = folder.parent
    for name in ("cpu", "cpu,cpuacct"):  # cgroup v1
        try:
            quota = int((root / name / "cpu.cfs_quota_us").read_text())
            period = int((root / name / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota > 0 and period > 0:
            return quota / period
    return None


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
