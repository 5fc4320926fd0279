"""What a process running student code may read of its interpreter once it is an unprivileged user.

Staff read this file to know how the grader's executor and the leaderboard's worker keep their
Python while they read nothing else. Each starts as root with a numeric uid and gid leased for
it; ``identity.enter`` runs ``cover`` as its ``prepare`` step, as root, before the drop:

* the interpreter, its standard library and its site-packages must be readable by that uid;
  a path the uid could not read even with every directory on the way open is an error: the
  process stops and says what to fix (``why_unreadable``, which the grader and the leaderboard's
  parent also ask before they start one);
* a directory on the way that the uid cannot traverse (a Python installed under a 0700
  ``/root``, say) is covered, in a mount namespace of the process's own, by a view that holds
  only the entries the interpreter needs (bind mounts of them), so the process sees the same
  paths and nothing else of that directory (``make_views``). No copy of Python is made.

Without root (``--same-user``) none of this runs.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
import tempfile
from pathlib import Path

from confine.identity import CLONE_NEWNS, MS_BIND, MS_PRIVATE, MS_REC, ConfinementError, check, libc, mount


def needed_paths() -> list[str]:
    """What this interpreter reads after the process has dropped to its uid: the executable,
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
    check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (a mount namespace of the process's own)")
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making the process's mounts private")
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
            mount(source.encode(), str(target), None, MS_BIND | MS_REC, None, f"bind-mounting {source}")
        mount(str(view).encode(), directory, None, MS_BIND | MS_REC, None, f"covering {directory} with its view")


def why_unreadable(uid: int, gid: int) -> str | None:
    """Why uid/gid cannot read what the interpreter needs even with views (None: it can)."""
    problems = unreadable(needed_paths(), uid, gid)
    if not problems:
        return None
    return (f"uid {uid} cannot read what the kit's Python needs: {'; '.join(problems[:4])}. "
            "Make these readable by others (chmod o+rX) or install Python where every user can read it.")


def cover(uid: int, gid: int, view_root: Path | None = None) -> None:
    """Make sure uid/gid can read what the interpreter needs (ConfinementError, saying what to
    fix, if it cannot even with views), covering each blocked directory with a view in
    ``view_root`` (None: a new folder in ``/tmp``, the process's own tmpfs after
    ``identity.own_files``); run as root, before ``identity.drop_privileges``."""
    why = why_unreadable(uid, gid)
    if why:
        raise ConfinementError(why)
    blocked = blocked_directories(needed_paths(), uid, gid)
    if blocked:
        make_views(blocked, view_root or Path(tempfile.mkdtemp(prefix="cs336-views-", dir="/tmp")))
