"""A Python the sandbox user can run, for machines where the kit's Python lives in a private place.

Read by staff who wonder why the grader copied Python into the temp folder. Test processes
drop to an unprivileged user once their tests are collected; from then on they import
standard-library modules, and torch.compile reads Python's headers, with that user's rights.
Where Python was installed under a private home (pyenv in /root, say), that fails. The grader
then makes, once per machine, a world-readable copy of the interpreter, its shared library,
standard library and headers, plus a virtual environment on top of it whose site-packages is
a link to the kit's own; test processes run that Python. Where Python is readable already
(a system Python, as on Gradescope), nothing is copied.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

_SKIPPED = ("site-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3")


def interpreter_paths() -> list[Path]:
    """What a test process must be able to read: the interpreter, the standard library, the headers."""
    return [
        Path(sys.executable).resolve(),
        Path(sysconfig.get_paths()["stdlib"]) / "os.py",
        Path(sysconfig.get_paths()["include"]),
    ]


def _safe_existing(path: Path) -> bool:
    """A finished mirror made by us: owned by this user, writable by nobody else."""
    try:
        info = path.stat()
    except OSError:
        return False
    return (path / "COMPLETE").exists() and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def mirrored_python(site_packages: Path) -> Path:
    """The python executable of the readable copy (built on first use); see the module docstring."""
    base = Path(sys.base_prefix).resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    tag = hashlib.sha256(f"{base}|{sys.version}|{site_packages}".encode()).hexdigest()[:12]
    mirror = Path(tempfile.gettempdir()) / f"cs336-grader-python-{tag}"
    python = mirror / "venv" / "bin" / "python"
    if _safe_existing(mirror):
        return python
    staging = Path(tempfile.mkdtemp(prefix="cs336-grader-python-"))
    (staging / "bin").mkdir()
    shutil.copy2(Path(sys.executable).resolve(), staging / "bin" / version)
    libdir = Path(sysconfig.get_config_var("LIBDIR") or base / "lib")
    (staging / "lib").mkdir()
    for library in libdir.glob("libpython*.so*"):
        shutil.copy2(library.resolve(), staging / "lib" / library.name)
    shutil.copytree(Path(sysconfig.get_paths()["stdlib"]), staging / "lib" / version,
                    ignore=shutil.ignore_patterns(*_SKIPPED), symlinks=True)
    include = Path(sysconfig.get_paths()["include"])
    if include.is_dir():
        shutil.copytree(include, staging / "include" / include.name, symlinks=True)
    venv = staging / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / version).mkdir(parents=True)
    (venv / "lib" / version / "site-packages").symlink_to(site_packages)
    (venv / "bin" / "python").symlink_to(Path("..", "..", "bin", version))
    (venv / "pyvenv.cfg").write_text(
        f"home = {mirror / 'bin'}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n"
    )
    for path in [staging, *staging.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path.parent.name == "bin" else 0o644)
    (staging / "COMPLETE").write_text(f"copied from {base}\n")
    shutil.rmtree(mirror, ignore_errors=True)
    try:
        staging.rename(mirror)
    except OSError:  # another grader finished first
        shutil.rmtree(staging, ignore_errors=True)
    return python


def library_path(python: Path) -> str:
    """LD_LIBRARY_PATH entry that lets the mirrored interpreter find its libpython."""
    return str(python.resolve().parent.parent / "lib")
