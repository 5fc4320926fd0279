"""A pool of user ids for executors, so that no two test processes on one host share one.

Read by the grader's runner, which leases one id for each test process it starts and hands it
to that process's executor (tests/executor/). An executor running as its own uid cannot signal,
trace or read the files of another grade's executor, nor of the harness (root). The ids need no
``/etc/passwd`` entry: root can ``setuid`` to any number, and the only files such a user owns
are its executor's folder.

A lease is an exclusive ``flock`` on ``<LOCK_DIR>/<uid>.lock``, held through an open file, so it
ends when the lease is released or its holder dies, and concurrent grades (separate grader
processes on one host) never get the same id.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

FIRST_UID = 2_000_100_000  # far above any real account and the usual subordinate-id ranges
POOL_SIZE = 4096
LOCK_DIR = Path("/run/cs336-grader-uids") if Path("/run").is_dir() else Path("/tmp/cs336-grader-uids")


class PoolExhausted(RuntimeError):
    """Every id of the pool is leased."""


@dataclass
class UidLease:
    """One leased id (uid and gid are the same number); ``release()`` gives it back."""

    uid: int
    _handle: int

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._handle >= 0:
            os.close(self._handle)  # closing the file ends the flock
            self._handle = -1


def lease(start: int = 0) -> UidLease:
    """Lease a free id, trying from ``FIRST_UID + start`` on; raise PoolExhausted if none is free."""
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    if LOCK_DIR.stat().st_uid != os.geteuid():
        raise PermissionError(f"{LOCK_DIR} is not owned by this user; remove it")
    for step in range(POOL_SIZE):
        uid = FIRST_UID + (start + step) % POOL_SIZE
        handle = os.open(LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        return UidLease(uid, handle)
    raise PoolExhausted(f"all {POOL_SIZE} executor user ids from {FIRST_UID} are in use")
