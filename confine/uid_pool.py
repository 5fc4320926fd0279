"""A pool of user ids for processes that run student code, so that no two of them share one.

Read by the grader (autograder/harness_process.py), which leases one id for each test process it starts and hands it
to that process's executor (executor/), and by the leaderboard, which leases one for each
worker. A process running as its own uid cannot signal, trace or read the files of another
grade's executor or leaderboard worker, nor of the harness (root). The ids need no
``/etc/passwd`` entry: root can ``setuid`` to any number; ids that do have an account are
skipped, so no real user's files are ever involved.

A lease is an exclusive ``flock`` on ``<lock dir>/<uid>.lock`` in a directory only root can
write, held through an open file, so it ends when the lease is released or its holder dies, and
concurrent grades and leaderboard runs on one host never get the same id. A lease starts and
ends with ``clear``: no process of that uid left running, and no file of its left in the shared
temporary folders.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confine.identity import ConfinementError, drop_privileges

FIRST_UID = 2_000_100_000  # far above any real account and the usual subordinate-id ranges
POOL_SIZE = 4096
LOCK_DIRS = (Path("/run/cs336-uid-pool"), Path(tempfile.gettempdir()) / "cs336-uid-pool")
SHARED_TEMP_DIRS = (Path(tempfile.gettempdir()), Path("/var/tmp"), Path("/dev/shm"), Path("/run/lock"),
                    Path("/var/lock"), Path("/dev/mqueue"))
# Where a user without an account could have written: every world-writable folder under these
# (at most SCAN_DEPTH folders down, through folders anyone may enter), found afresh at most
# every SCAN_TTL_S seconds. /usr, /etc, /proc, /sys and home folders of real users are not
# writable to such a user on a sane host.
SCAN_ROOTS = (Path(tempfile.gettempdir()), Path("/tmp"), Path("/var"), Path("/run"), Path("/dev/shm"),
              Path("/dev/mqueue"), Path("/home"), Path("/opt"), Path("/srv"), Path("/mnt"), Path("/media"))
SCAN_DEPTH = 4
SCAN_TTL_S = 60.0
_scanned: tuple[float, tuple[Path, ...]] = (float("-inf"), ())


class PoolUnavailable(RuntimeError):
    """No id can be leased: every one is in use, or there is no safe place for the lock files."""


@dataclass
class UidLease:
    """One leased id (uid and gid are the same number); ``release()`` clears it and gives it back."""

    uid: int
    _handle: int

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._handle >= 0:
            clear(self.uid)
            os.close(self._handle)  # closing the file ends the flock
            self._handle = -1


def _lock_dir() -> Path:
    """A directory only root can write, for the lock files (made if absent)."""
    for directory in LOCK_DIRS:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        st = os.lstat(directory)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return directory
    raise PoolUnavailable(f"no directory only this user can write for the uid lock files; tried {LOCK_DIRS}")


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def lease(start: int = 0) -> UidLease:
    """Lease a free id, trying from ``FIRST_UID + start`` on (needs root); raise PoolUnavailable if none is free."""
    directory = _lock_dir()
    for step in range(POOL_SIZE):
        uid = FIRST_UID + (start + step) % POOL_SIZE
        if _has_account(uid):
            continue
        handle = os.open(directory / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        clear(uid)  # whatever a crashed earlier holder left behind
        return UidLease(uid, handle)
    raise PoolUnavailable(f"all {POOL_SIZE} sandbox user ids from {FIRST_UID} are in use")


@contextmanager
def leased(start: int = 0) -> Iterator[UidLease]:
    """``lease()`` for the duration of a ``with`` block."""
    held = lease(start)
    try:
        yield held
    finally:
        held.release()


def kill_all(uid: int) -> None:
    """SIGKILL every process of ``uid``: a child becomes that uid and sends ``kill(-1)``, which
    reaches exactly the processes that uid may signal (its own), however fast they fork."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            drop_privileges(uid, uid)
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ConfinementError):
            pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def writable_places() -> tuple[Path, ...]:
    """Every folder a leased user could write in: the shared temporary folders and each
    world-writable folder found under ``SCAN_ROOTS`` (see there), without duplicates."""
    global _scanned
    found_at, places = _scanned
    if time.monotonic() - found_at < SCAN_TTL_S:
        return places
    found: dict[str, Path] = {}
    stack = [(root, 0) for root in SCAN_ROOTS]
    while stack:
        folder, depth = stack.pop()
        try:
            info = folder.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        if info.st_mode & stat.S_IWOTH:
            found.setdefault(os.path.realpath(folder), folder)
        if depth >= SCAN_DEPTH or not info.st_mode & stat.S_IXOTH:
            continue  # no one without an account gets further in
        try:
            children = [Path(entry.path) for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        stack += [(child, depth + 1) for child in children]
    for folder in SHARED_TEMP_DIRS:
        if folder.is_dir():
            found.setdefault(os.path.realpath(folder), folder)
    places = tuple(found.values())
    _scanned = (time.monotonic(), places)
    return places


def clear(uid: int) -> None:
    """No process of ``uid`` left running, and no file of its left in any folder it could write in."""
    kill_all(uid)
    for directory in writable_places():
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
