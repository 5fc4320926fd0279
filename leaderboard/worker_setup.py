"""Where and as whom the worker runs: a leased uid, a fresh directory, a clean environment.

Staff read this file to know what the process that runs student code can touch. For each run
the parent (root):

* leases a numeric uid (and the same gid) from the pool that grades share
  (``confine/uid_pool.py``): an exclusive ``flock`` on that uid's lock file in a root-only
  directory, so no two leaderboard runs or grades on one host share one; uids that name an
  account are skipped. The worker drops to it by number (``confine/views.py``). Before and after the
  run every process of that uid is killed (``kill(-1, SIGKILL)`` sent as that uid) and the files
  it left in the shared temporary directories are removed;
* makes a fresh directory (root-owned, mode 0711) holding ``kit/`` (root-owned: the few
  leaderboard modules the worker runs, copied from the kit, so the kit itself need not be
  readable), ``views/`` (root-owned, for ``confine/views.py``'s views) and ``work/`` (owned by the uid,
  mode 0700: the worker's cwd, HOME, TMPDIR and compile caches, and ``work/submission/``, a
  copy of the submission's files from the bytes the parent hashed);
* gives the worker an environment built from scratch (``worker_env``): no variable of the
  parent's except the few that locate the GPU, its libraries and a compiler.

``preflight`` refuses to start (``SandboxUnavailable``, exit status 2) when the kit, the store
or the interpreter is writable by the uid, or when the parent is not root and the run was not
explicitly ``--same-user``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from confine import uid_pool
from confine.environment import machine_env, own_folders
from confine.views import needed_paths, why_unreadable
from leaderboard.store import ROOT

# What the worker imports from the kit (copied into every sandbox): the modules of confine/ and
# leaderboard/ named here, nothing else of theirs, and the kit's shared packages whole (students
# get them too): executor/ (what runs beside a submission) and harness/ (the truths it checks with).
SHARED_PACKAGES = ("executor", "harness")
WORKER_MODULES = (
    "confine/__init__.py",
    "confine/frames.py",
    "confine/identity.py",
    "confine/limits.py",
    "confine/views.py",
    "leaderboard/__init__.py",
    "leaderboard/config.py",
    "leaderboard/detectors.py",
    "leaderboard/gate.py",
    "leaderboard/kernels.py",
    "leaderboard/machine.py",
    "leaderboard/protocol.py",
    "leaderboard/timer_guard.py",
    "leaderboard/timing.py",
    "leaderboard/worker.py",
    "leaderboard/worker_boot.py",
    *sorted(path.relative_to(ROOT).as_posix() for package in SHARED_PACKAGES
            for path in (ROOT / package).rglob("*.py")),
)
SAME_USER_HINT = (
    "run the leaderboard as root, so that the student code runs as an unprivileged uid of its own "
    "that cannot write the kit or the results store; or pass --same-user to run code you trust "
    "(your own) as yourself"
)


class SandboxUnavailable(RuntimeError):
    """The worker cannot be isolated as required; the message says what to fix."""


def is_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class Identity:
    """Who the worker runs as: a leased uid and gid, or None for both (``--same-user``)."""

    uid: int | None
    gid: int | None

    @property
    def isolated(self) -> bool:
        return self.uid is not None


@contextmanager
def lease_uid() -> Iterator[Identity]:
    """Hold one uid of the shared pool (confine/uid_pool.py) for the duration; it is cleared
    (no process or temp file of it left) when leased and when given back."""
    try:
        with uid_pool.leased() as held:
            yield Identity(held.uid, held.gid)
    except uid_pool.PoolUnavailable as error:
        raise SandboxUnavailable(str(error)) from None


def clear_uid(identity: Identity) -> None:
    """No process of the uid left running, and no file of its left in the shared temp dirs."""
    if identity.isolated:
        uid_pool.clear(identity.uid)


def _writable_by(path: Path, identity: Identity) -> bool:
    """Whether the uid could change ``path`` (a file or directory) by its mode bits; a sticky
    directory only lets it change its own entries, which are not ours."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return False
    if st.st_uid == identity.uid:
        return True
    shift = 3 if st.st_gid == identity.gid else 0
    writable = bool(st.st_mode & (stat.S_IWOTH << shift))
    return writable and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)


# Files no import can pick up, whose being writable plants nothing (a venv's `.lock`, say).
HARMLESS_SUFFIXES = (".lock",)


def writable_paths(roots: list[Path], identity: Identity, limit: int = 5, skip: tuple[str, ...] = ()) -> list[str]:
    """Up to ``limit`` files or directories under ``roots`` (and the roots' own directories up
    to /) that the uid could write."""
    found: list[str] = []
    for root in roots:
        for ancestor in [root, *root.parents]:
            if ancestor.exists() and _writable_by(ancestor, identity):
                found.append(str(ancestor))
        if not root.is_dir():
            continue
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in skip]
            for name in dirs + [f for f in files if not f.endswith(HARMLESS_SUFFIXES)]:
                path = Path(directory) / name
                try:
                    if _writable_by(path, identity):
                        found.append(str(path))
                except OSError:
                    continue
                if len(found) >= limit:
                    return found
    return found[:limit]


def preflight(identity: Identity, store: Path | None) -> None:
    """Refuse to run (``SandboxUnavailable``) where the isolation would not hold."""
    missing = [m for m in WORKER_MODULES if not (ROOT / m).is_file()]
    if missing:
        raise SandboxUnavailable(f"the kit lacks the worker's modules {missing}")
    if not identity.isolated:
        return
    why = why_unreadable(identity.uid, identity.gid)
    if why:
        raise SandboxUnavailable(f"the sandbox {why}")
    roots = [ROOT] + [Path(p) for p in needed_paths() if not Path(p).is_relative_to(ROOT)]
    if store is not None:
        roots.append(Path(store).resolve().parent)
    # The interpreter's trees are large; their directories and top files are what a planted
    # module would need, and a site-packages that others may write is already a broken install.
    writable = writable_paths(roots, identity, skip=(".git", "__pycache__", "site-packages", "node_modules"))
    if writable:
        raise SandboxUnavailable(
            f"the sandbox uid {identity.uid} could write {', '.join(writable)}: the kit, the results store and "
            "the interpreter must not be writable by others (chmod -R o-w on them)"
        )


@dataclass(frozen=True)
class SandboxDirs:
    """The directories of one run (see the module docstring)."""

    root: Path
    kit: Path
    views: Path
    work: Path
    submission: Path


def make_sandbox(files: dict[str, bytes], identity: Identity) -> SandboxDirs:
    """A fresh sandbox holding the worker's modules and a copy of ``files`` (relative path ->
    bytes, the parent's own copy of the submission)."""
    root = Path(tempfile.mkdtemp(prefix="leaderboard-sandbox-"))
    os.chmod(root, 0o711)
    dirs = SandboxDirs(root, root / "kit", root / "views", root / "work", root / "work" / "submission")
    for module in WORKER_MODULES:
        target = dirs.kit / module
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / module).read_bytes())
    for directory, _, names in os.walk(dirs.kit):
        os.chmod(directory, 0o755)
        for name in names:
            os.chmod(Path(directory) / name, 0o644)
    dirs.views.mkdir(mode=0o711)
    os.chmod(dirs.views, 0o711)
    for sub in ("home", "tmp", "cache"):
        (dirs.work / sub).mkdir(parents=True)
    for relative, data in files.items():
        target = dirs.submission / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if identity.isolated:
        for directory, subdirs, names in os.walk(dirs.work):
            for name in [directory] + [os.path.join(directory, n) for n in subdirs + names]:
                os.chown(name, identity.uid, identity.gid)
    os.chmod(dirs.work, 0o700)
    return dirs


def remove_sandbox(dirs: SandboxDirs) -> None:
    shutil.rmtree(dirs.root, ignore_errors=True)


def worker_env(mode: str, dirs: SandboxDirs) -> dict[str, str]:
    """The worker's whole environment (see the module docstring)."""
    env = machine_env()  # where the GPU, its libraries and a compiler are (confine/environment.py)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(own_folders(dirs.work, "leaderboard-worker"))
    if mode == "cpu":
        env.update(TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    else:
        # Compile in the worker itself: a pool of compile processes per run costs more to
        # start than the few kernels a submission has take to compile.
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    return env
