"""What the leaderboard's worker may read of its interpreter once it is an unprivileged user.

Staff read this file to know how the worker keeps its Python while it reads nothing else. The
parent starts the worker as root with a numeric uid and gid it has leased for the run; the
worker's first act is ``identity.enter`` with ``cover`` as its ``prepare`` step, which runs
as root, before the drop:

* the interpreter, its standard library and its site-packages must be readable by that uid;
  a path the uid could not read even with every directory on the way open is an error: the run
  stops and says what to fix (``unreadable``; the parent's preflight asks the same first);
* a directory on the way that the uid cannot traverse (a Python installed under a 0700
  ``/root``, say) is covered, in a mount namespace of the worker's own, by a view that holds
  only the entries the interpreter needs (bind mounts of them), so the worker sees the same
  paths and nothing else of that directory (``make_views``).

Without root (``--same-user``) none of this runs. The grader's executor has no views: its
grade stops, with a message, where the uid cannot read the interpreter.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import sysconfig
from pathlib import Path

from confine.identity import ConfinementError, check, libc

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


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


def make_views(blocked: dict[str, set[str]], view_root: Path) -> None:
    """In a new mount namespace, cover each blocked directory with a view holding only the
    entries the interpreter needs (deepest first, so a view of an outer directory carries the
    views of inner ones)."""
    c = libc()
    c.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
    check(c.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (a mount namespace of the worker's own)")
    check(c.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the worker's mounts private")
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
            check(c.mount(source.encode(), str(target).encode(), None, MS_BIND | MS_REC, None), f"bind-mounting {source}")
        check(c.mount(str(view).encode(), directory.encode(), None, MS_BIND | MS_REC, None), f"covering {directory} with its view")


def cover(uid: int, gid: int, view_root: Path) -> None:
    """Make sure uid/gid can read what the interpreter needs (ConfinementError, saying what to
    fix, if it cannot even with views), covering each blocked directory with a view in
    ``view_root``; run as root, before ``identity.drop_privileges`` (``identity.enter``'s ``prepare``)."""
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
