"""Who a process running student code is: a network of its own, then an unprivileged user for good.

Read by staff who need to know what the grader's executor and the leaderboard's worker can
reach; called by each as its first act, as root, before it imports torch or anything else.
Uses only the standard library.

``enter(uid, gid)``:

1. ``unshare(CLONE_NEWNET)``: the process gets a network namespace holding only a loopback
   interface, which is brought up, so gloo and NCCL rendezvous on 127.0.0.1 still work between
   the processes it starts, while no address of the host or beyond can be reached, and no port
   it binds (29500 included) is seen by anything outside;
2. ``own_files(keep)``: a mount namespace of its own, with a fresh, size-bounded tmpfs over each
   folder every user may write (``PRIVATE_DIRS``: ``/tmp``, ``/var/tmp``, ``/dev/shm``,
   ``/run/lock``), so that two grades cannot meet through a socket file or a file there, and
   shared memory counts against a bound of its own; the process's own folders that lie under
   one (its work folder, its interpreter) are bound back in place;
3. ``prepare(uid, gid)``, while still root: by default ``views.cover``, which makes the
   interpreter readable by the uid (views over closed directories on the way to it);
4. ``drop_privileges``: every supplementary group dropped, then the group and user ids (real,
   effective and saved) set to the leased ones, checked, and no way back to root.

``harden()``, after that: ``PR_SET_NO_NEW_PRIVS`` (no set-uid program or file capability can
give privileges back), ``PR_SET_PDEATHSIG`` (the process dies with its parent; set after the
drop, which clears it) and no core files.

Where the kernel refuses a network or mount namespace (an unprivileged container), step 1 or 2
is skipped and ``network_confined`` or ``files_confined`` says so; the executor's tripwire still refuses the submission's Python
sockets to addresses that are not loopback.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable

from confine import limits

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
# Folders any user may write, each covered by a tmpfs of this size (tmpfs pages are memory).
PRIVATE_DIRS = {"/tmp": "1g", "/var/tmp": "256m", "/dev/shm": "1g", "/run/lock": "16m"}
files_confined = False
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
network_confined = False


class ConfinementError(RuntimeError):
    """The process cannot be confined as asked; the message says why and what to fix."""


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise ConfinementError naming ``what`` if a libc call returned non-zero."""
    if result != 0:
        raise ConfinementError(f"{what} failed: {os.strerror(ctypes.get_errno())}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def own_network() -> bool:
    """Move this process into a new network namespace with loopback up; False where refused."""
    global network_confined
    if libc().unshare(CLONE_NEWNET) != 0:
        return False
    _loopback_up()
    network_confined = True
    return True


def mount(source: bytes | None, target: str, kind: bytes | None, flags: int, data: bytes | None, what: str) -> None:
    c = libc()
    c.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    check(c.mount(source, target.encode(), kind, flags, data), what)


def _make_path(path: str, top: str) -> None:
    """``mkdir -p path`` below ``top``, each new folder traversable by every user (0755), whatever the umask."""
    parts = os.path.relpath(path, top).split(os.sep)
    current = top
    for part in parts:
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)
            os.chmod(current, 0o755)


KEPT_ENV_DIRS = ("TRITON_CACHE_DIR",)  # a folder the process's environment names, kept (a grade's shared replay cache)


def _kept(keep: list[str]) -> list[str]:
    """The real paths of ``keep``, and of the folder holding each symbolic link on the way to one:
    a path through a link under a private folder (a kit in /tmp whose .venv links elsewhere) must
    still resolve once that folder is replaced."""
    kept = set()
    for path in keep:
        if not path or not os.path.exists(path):
            continue
        kept.add(os.path.realpath(path))
        here = os.path.abspath(path)
        while here != os.path.dirname(here):
            if os.path.islink(here):
                kept.add(os.path.realpath(os.path.dirname(here)))
            here = os.path.dirname(here)
    return sorted(kept)


def own_files(keep: list[str]) -> bool:
    """Step 2 of the module docstring; False where the kernel refuses a mount namespace. ``keep``:
    paths this process needs that may lie under one of ``PRIVATE_DIRS``."""
    global files_confined
    if libc().unshare(CLONE_NEWNS) != 0:
        return False
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making this process's mounts private")
    kept = _kept(keep)
    for directory, size in PRIVATE_DIRS.items():
        if os.path.islink(directory) or not os.path.isdir(directory):
            continue
        real = os.path.realpath(directory)
        under = [path for path in kept if path == real or path.startswith(real + "/")]
        if real in under:
            continue  # the process runs from the folder itself: leave it as it is
        tops = [path for path in under if not any(other != path and path.startswith(other + "/") for other in under)]
        handles = [(path, os.open(path, os.O_PATH)) for path in tops]
        try:
            mount(b"tmpfs", real, b"tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777".encode(),
                  f"a private {directory}")
            for path, handle in handles:
                is_dir = os.path.isdir(f"/proc/self/fd/{handle}")
                _make_path(path if is_dir else os.path.dirname(path), real)
                if not is_dir:
                    open(path, "a").close()
                mount(f"/proc/self/fd/{handle}".encode(), path, None, MS_BIND | MS_REC, None, f"keeping {path}")
        finally:
            for _, handle in handles:
                os.close(handle)
    files_confined = True
    return True


def drop_privileges(uid: int, gid: int) -> None:
    """Become uid/gid for good: no supplementary groups, real = effective = saved ids."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise ConfinementError(f"the process still has ids {os.getresuid()}, {os.getresgid()}, groups {os.getgroups()}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise ConfinementError("the process could become root again after dropping its privileges")


def harden() -> None:
    """No new privileges, death with the parent, no core files (see the module docstring)."""
    c = libc()
    parent = os.getppid()
    check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    check(c.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(3)
    limits.apply({"core_bytes": 0})


def enter(uid: int | None, gid: int | None = None, prepare: Callable[[int, int], None] | None = None) -> None:
    """Steps 1-4 of the module docstring; a no-op for ``uid`` None (no isolation asked). Raises
    ConfinementError, saying what to fix, when the process cannot be confined."""
    if uid is None:
        return
    gid = uid if gid is None else gid
    if os.geteuid() != 0:
        raise ConfinementError(f"the process must start as root to drop to uid {uid}; it runs as uid {os.geteuid()}")
    own_network()
    own_files([os.getcwd(), os.path.dirname(os.getcwd()), sys.prefix, sys.base_prefix, sys.exec_prefix,
               os.path.dirname(sys.executable), *sys.path, *(arg for arg in sys.argv if arg.startswith("/")),
               *(os.environ.get(name, "") for name in KEPT_ENV_DIRS)])
    if prepare is None:
        from confine.views import cover as prepare  # not at the top: views imports this module
    prepare(uid, gid)
    drop_privileges(uid, gid)
