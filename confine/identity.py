"""Who a process running student code is: a network of its own, then an unprivileged user for good.

Read by staff who need to know what the grader's executor and the leaderboard's worker can
reach; called by each as its first act, as root, before it imports torch or anything else.
Uses only the standard library.

``enter(uid, gid)``:

1. ``unshare(CLONE_NEWNET)``: the process gets a network namespace holding only a loopback
   interface, which is brought up, so gloo and NCCL rendezvous on 127.0.0.1 still work between
   the processes it starts, while no address of the host or beyond can be reached, and no port
   it binds (29500 included) is seen by anything outside;
2. ``prepare(uid, gid)``, when given, while still root (the leaderboard's worker covers closed
   directories on the way to its interpreter with views there);
3. ``drop_privileges``: every supplementary group dropped, then the group and user ids (real,
   effective and saved) set to the leased ones, checked, and no way back to root.

``harden()``, after that: ``PR_SET_NO_NEW_PRIVS`` (no set-uid program or file capability can
give privileges back), ``PR_SET_PDEATHSIG`` (the process dies with its parent; set after the
drop, which clears it) and no core files.

Where the kernel refuses a network namespace (an unprivileged container), step 1 is skipped and
``network_confined`` says so; the executor's tripwire still refuses the submission's Python
sockets to addresses that are not loopback.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
from collections.abc import Callable

from confine import limits

CLONE_NEWNET = 0x40000000
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
    """Steps 1-3 of the module docstring; a no-op for ``uid`` None (no isolation asked). Raises
    ConfinementError, saying what to fix, when the process cannot be confined."""
    if uid is None:
        return
    gid = uid if gid is None else gid
    if os.geteuid() != 0:
        raise ConfinementError(f"the process must start as root to drop to uid {uid}; it runs as uid {os.geteuid()}")
    own_network()
    if prepare is not None:
        prepare(uid, gid)
    drop_privileges(uid, gid)
