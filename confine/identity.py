"""The executor's first act: a network of its own, then the unprivileged user it was leased.

Read by ``client.py`` (which starts the executor as root when it has a user id to give it) and
by ``server.py``'s bootstrap, which calls ``enter`` before it imports torch or anything else.
Uses only the standard library.

``enter(uid, gid)``, running as root:

1. ``unshare(CLONE_NEWNET)``: the process gets a network namespace holding only a loopback
   interface, which is brought up, so gloo and NCCL rendezvous on 127.0.0.1 still work between
   the processes it starts, while no address of the host or beyond can be reached, and no port
   it binds (29500 included) is seen by anything outside;
2. drops every supplementary group, then sets its group and user ids to the leased ones.

Where the kernel refuses a network namespace (an unprivileged container), step 1 is skipped and
``network_confined`` says so; the tripwire (``tripwire.py``) still refuses the submission's
Python sockets to addresses that are not loopback.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
network_confined = False


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def own_network() -> bool:
    """Move this process into a new network namespace with loopback up; False where refused."""
    global network_confined
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return False
    _loopback_up()
    network_confined = True
    return True


def enter(uid: int | None, gid: int | None) -> None:
    """Confine this process (see the module docstring); a no-op for ``uid`` None (no isolation)."""
    if uid is None:
        return
    own_network()
    os.setgroups([])
    os.setgid(gid if gid is not None else uid)
    os.setuid(uid)
