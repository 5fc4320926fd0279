"""How the worker confines itself before any student code runs: its own user, no way back.

Staff read this file to know what the worker can reach. The parent starts the worker as root
with a numeric uid and gid it has leased for this run (``sandbox``); the worker's first act,
before it imports torch or the submission, is ``enter``:

1. The interpreter, its standard library and its site-packages must be readable by that uid.
   A directory on the way that the uid cannot traverse (a Python installed under a 0700
   ``/root``, say) is covered, in a mount namespace of the worker's own, by a view that holds
   only the entries the interpreter needs (bind mounts of them), so the worker sees the same
   paths and nothing else of that directory. A path the uid could not read even then is an
   error: the run stops and says what to fix.
2. ``setgroups([])``, then the gid and the uid (real, effective and saved): no way back to root.
3. ``harden``: ``PR_SET_NO_NEW_PRIVS`` (no set-uid program or file capability can give
   privileges back), ``PR_SET_PDEATHSIG`` (the worker dies with the parent), no core files.

Without root (``--unisolated``) only step 3 runs.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import sys
import sysconfig
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38


class ConfinementError(RuntimeError):
    """The worker cannot be confined as asked; the message says why and what to fix."""


def needed_paths() -> list[str]:
    """What this interpreter reads after the worker has dropped to its uid: the executable,
    the prefixes, the standard library, the C headers (Triton builds launchers against them),
    the shared library directory and every site-packages directory, resolved and existing."""
    paths = [sys.executable, os.path.dirname(sys.executable), sys.prefix, sys.base_prefix]
    info = sysconfig.get_paths()
    paths += [info.get(key) for key in ("stdlib", "platstdlib", "include", "platinclude", "purelib", "platlib")]
    paths.append(sysconfig.get_config_var("LIBDIR"))
    paths += [entry for entry in sys.path if "-packages" in entry]
    found = []
    for path in paths:
        if path and os.path.exists(path):
            real = os.path.realpath(path)
            if real not in found:
                found.append(real)
    return found


def _may(st: os.stat_result, uid: int, gid: int, bits: str) -> bool:
    """Whether uid/gid (with no supplementary groups) has the permission bits ``bits`` ("r",
    "w", "x", any combination) on an inode, by its mode alone."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    masks = {"r": stat.S_IROTH, "w": stat.S_IWOTH, "x": stat.S_IXOTH}
    return all(st.st_mode & (masks[b] << shift) for b in bits)


def blocked_directories(paths: list[str], uid: int, gid: int) -> dict[str, set[str]]:
    """Directories on the way to ``paths`` that uid/gid cannot traverse, each with the names of
    its entries that lead to a path (what a view of that directory must hold)."""
    blocked: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(os.path.realpath(path)).parts
        for depth in range(1, len(parts)):
            directory = os.path.join(*parts[:depth])
            if not _may(os.stat(directory), uid, gid, "x"):
                blocked.setdefault(directory, set()).add(parts[depth])
    return blocked


def unreadable(paths: list[str], uid: int, gid: int) -> list[str]:
    """Paths uid/gid could not read even with every directory on the way open to it."""
    problems = []
    for path in paths:
        st = os.stat(path)
        bits = "rx" if stat.S_ISDIR(st.st_mode) else "r"
        if not _may(st, uid, gid, bits):
            problems.append(f"{path} (mode {stat.filemode(st.st_mode)}, owner {st.st_uid}:{st.st_gid})")
    return problems


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(f"{what} failed: {os.strerror(errno)}")


def make_views(blocked: dict[str, set[str]], view_root: Path) -> None:
    """In a new mount namespace, cover each blocked directory with a view holding only the
    entries the interpreter needs (deepest first, so a view of an outer directory carries the
    views of inner ones)."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (a mount namespace of the worker's own)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the worker's mounts private")
    for number, directory in enumerate(sorted(blocked, key=lambda d: -len(Path(d).parts))):
        view = view_root / f"view{number}"
        view.mkdir(mode=0o711)
        os.chmod(view, 0o711)
        for name in sorted(blocked[directory]):
            source = os.path.join(directory, name)
            target = view / name
            if os.path.isdir(source):
                target.mkdir()
            else:
                target.touch()
            _check(libc.mount(source.encode(), str(target).encode(), None, MS_BIND | MS_REC, None), f"bind-mounting {source}")
        _check(libc.mount(str(view).encode(), directory.encode(), None, MS_BIND | MS_REC, None), f"covering {directory} with its view")


def drop_privileges(uid: int, gid: int) -> None:
    """Become uid/gid for good: no supplementary groups, real = effective = saved ids."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise ConfinementError(f"the worker still has ids {os.getresuid()}, {os.getresgid()}, groups {os.getgroups()}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise ConfinementError("the worker could become root again after dropping its privileges")


def harden() -> None:
    """No new privileges, die with the parent, no core files (see the module docstring)."""
    libc = _libc()
    parent = os.getppid()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(3)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def enter(uid: int, gid: int, view_root: Path) -> None:
    """Confine this process to uid/gid (steps 1-3 of the module docstring); raises
    ConfinementError, saying what to fix, when it cannot."""
    if os.geteuid() != 0:
        raise ConfinementError(f"the worker must start as root to drop to uid {uid}; it runs as uid {os.geteuid()}")
    paths = needed_paths()
    problems = unreadable(paths, uid, gid)
    if problems:
        raise ConfinementError(
            f"uid {uid} cannot read what the worker's Python needs: {'; '.join(problems[:4])}. "
            "Make these readable by others (chmod o+rX) or install Python where every user can read it."
        )
    blocked = blocked_directories(paths, uid, gid)
    if blocked:
        make_views(blocked, view_root)
    drop_privileges(uid, gid)
    harden()
