"""Build the Gradescope autograder zip: ``python -m autograder bundle``.

Read by staff setting up the course on Gradescope. The zip holds, at its top level,
Gradescope's ``setup.sh`` and ``run_autograder`` (from autograder/gradescope/) and the kit
under ``kit/``: everything the grader needs, the hidden tests and the reference included, and
nothing local (no .git, .venv, caches, results, dist, leaderboard). Gradescope unpacks it into
/autograder/source, runs setup.sh once to build the image, and run_autograder per submission.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
GRADESCOPE = Path(__file__).resolve().parent / "gradescope"
LEFT_OUT_DIRS = {".git", ".venv", ".ci", "dist", "results", "leaderboard", "__pycache__", ".pytest_cache",
                 ".hypothesis", ".whl", ".gl", "build"}
LEFT_OUT_SUFFIXES = (".pyc", ".egg-info", ".zip", ".nsys-rep", ".pickle", ".pt")
MAX_FILE_BYTES = 5 * 1024 * 1024


def kit_files(kit: Path = KIT) -> list[Path]:
    """The kit's files that go into the bundle, relative to ``kit``, sorted."""
    files = []
    for dirpath, dirnames, filenames in os.walk(kit):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in LEFT_OUT_DIRS and not d.endswith(LEFT_OUT_SUFFIXES)
                             and not d.startswith("."))
        for name in sorted(filenames):
            path = here / name
            if name.endswith(LEFT_OUT_SUFFIXES) or name.startswith(".") or not path.exists():
                continue
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            files.append(path.relative_to(kit))
    return files


def _add(archive: zipfile.ZipFile, source: Path, name: str) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    mode = source.stat().st_mode  # follows symlinks: the zip holds the file itself
    info.external_attr = ((0o755 if mode & stat.S_IXUSR else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, source.read_bytes())


def build_bundle(out: Path, *, kit: Path = KIT) -> Path:
    """Write the Gradescope autograder zip to ``out``; return its path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for name in ("setup.sh", "run_autograder"):
            _add(archive, GRADESCOPE / name, name)
        for relative in kit_files(kit):
            _add(archive, kit / relative, f"kit/{relative.as_posix()}")
    return out
