"""How much time a test is charged: the CPU time its processes used, not the wall clock of a shared machine.

Read by harness/client.py and process.py (the executor's share of a test's limit) and by the grader's
watchdog (over the whole test process). On a machine that other
work keeps busy, a test's wall time stretches while the CPU time it needs does not; a test that
runs several processes or threads at once uses CPU time faster than the clock. A ``Budget``
therefore charges ``min(wall, CPU time of the process tree)`` since the test began, the smaller
of the two, so neither a busy machine nor parallel work counts against a test; a process that
waits on nothing forever (a deadlock, a sleep) is stopped by ``wall_limit_s``, the backstop.

The CPU time of a tree is read from ``/proc/<pid>/stat``: user and system time of each live
process in the tree, all threads included, plus the time of the children it has already
reaped (so a worker that exits is not forgotten). Where ``/proc`` cannot say (not Linux, or
hidden), ``tree_cpu_seconds`` returns None and the budget charges the wall clock.
"""

from __future__ import annotations

import os
import time

# The wall-clock backstop, in multiples of a test's limit: a test that waits on nothing this long
# is stopped whatever its CPU time. 4: on 2 cores shared by the grade's 2 chains and 4 other busy
# processes, a test gets a third of a core, so its wall time is 3 times its CPU time.
WALL_FACTOR = 4.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime + cutime + cstime in seconds) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # fields after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        return int(fields[1]), sum(int(value) for value in fields[11:15]) / _TICKS
    except (ValueError, IndexError):
        return None


def tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds used by process ``root`` and its descendants (live ones, and those reaped); None
    when ``/proc`` cannot tell (then callers fall back to the wall clock)."""
    own = _stat(root)
    if own is None:
        return None
    children: dict[int, list[int]] = {}
    times = {root: own[1]}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return own[1]
    for entry in entries:
        if not entry.isdigit() or int(entry) == root:
            continue
        found = _stat(int(entry))
        if found is not None:
            children.setdefault(found[0], []).append(int(entry))
            times[int(entry)] = found[1]
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        total += times.get(pid, 0.0)
        pending += children.get(pid, [])
    return total


class Budget:
    """One test's time: ``charged()`` is ``min(wall, CPU of the tree under pid())`` since ``start``;
    ``expired()`` once that reaches ``limit_s`` or the wall clock reaches ``wall_limit_s``.

    ``pid`` is called each time (a process may be restarted within a test: ``exclude`` takes its
    start-up out of the charge, and ``rebase`` starts counting a new process from now).
    """

    def __init__(self, limit_s: float, wall_limit_s: float, pid):
        self.limit_s = limit_s
        self.wall_limit_s = max(wall_limit_s, limit_s)
        self._pid = pid
        self.started = time.monotonic()
        self._excluded_wall = 0.0
        self._cpu_before = 0.0  # CPU charged to processes of this test that are gone
        self._cpu_base = self._cpu_now()
        self._last_cpu = 0.0

    def _cpu_now(self) -> float | None:
        pid = self._pid()
        return None if pid is None else tree_cpu_seconds(pid)

    def wall(self) -> float:
        return time.monotonic() - self.started - self._excluded_wall

    def cpu(self) -> float | None:
        now = self._cpu_now()
        if now is None or self._cpu_base is None:
            return None
        self._last_cpu = self._cpu_before + max(0.0, now - self._cpu_base)
        return self._last_cpu

    def charged(self) -> float:
        """The seconds this test has used: the smaller of its wall and CPU time (wall where CPU is unknown)."""
        wall, cpu = self.wall(), self.cpu()
        return wall if cpu is None else min(wall, cpu)

    def expired(self) -> bool:
        wall = self.wall()
        if wall < self.limit_s:  # the charge is at most the wall time: no need to read /proc
            return False
        return wall >= self.wall_limit_s or self.charged() >= self.limit_s

    def wall_deadline(self) -> float:
        """The monotonic time at which the wall-clock backstop ends the test."""
        return self.started + self._excluded_wall + self.wall_limit_s

    def exclude(self, seconds: float) -> None:
        """Do not charge ``seconds`` of wall time that just passed (a process starting up)."""
        self._excluded_wall += seconds

    def rebase(self) -> None:
        """A new process replaces the old one: keep what the old one was last seen to use, count the
        new one from now (its start-up is not charged)."""
        self._cpu_before = self._last_cpu
        self._cpu_base = self._cpu_now()
