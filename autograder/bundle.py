"""Build the Gradescope autograder zip: ``python -m autograder bundle``.

Read by staff setting up the course on Gradescope. The zip holds, at its top level,
Gradescope's ``setup.sh`` and ``run_autograder`` (from autograder/gradescope/) and the kit
under ``kit/``: everything the grader needs, the hidden tests and the reference included, and
nothing local (no .git, .venv, caches, results, dist, leaderboard). Gradescope unpacks it into
/autograder/source, runs setup.sh once to build the image, and run_autograder per submission.

The bundle embeds the course's hidden seed as ``kit/autograder/hidden_seed``: the one staff
choose (``--secret``, or ``$CS336_HIDDEN_SEED``), else a fresh random one made at bundle time.
Gradescope passes no environment to run_autograder, which reads the file (root only after
setup.sh's lock_down.sh) and exports it as ``CS336_HIDDEN_SEED``.
"""

from __future__ import annotations

import os
import secrets
import stat
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
GRADESCOPE = Path(__file__).resolve().parent / "gradescope"
LEFT_OUT_DIRS = {".git", ".venv", ".ci", "dist", "results", "leaderboard", "gpu_checks", "records", "benchmarks",
                 "fixtures", "selftests", "peer_checks", "__pycache__", ".pytest_cache",
                 ".hypothesis", ".whl", ".gl", "build"}
LEFT_OUT_SUFFIXES = (".pyc", ".egg-info", ".zip", ".nsys-rep", ".pickle", ".pt")
MAX_FILE_BYTES = 5 * 1024 * 1024
SEED_FILE = "kit/autograder/hidden_seed"
MIN_SECRET_CHARS = 6


class BundleError(ValueError):
    """The bundle cannot be built as asked (a secret too short); the message says what to change."""


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


def build_bundle(out: Path, *, kit: Path = KIT, secret: str | None = None, edition: str | None = None) -> Path:
    """Write the Gradescope autograder zip to ``out``; return its path. ``secret``: the hidden seed
    to embed (default: a fresh random one); BundleError when shorter than MIN_SECRET_CHARS.
    ``edition``: the course edition it grades (default: the manifest's chosen one), written as
    ``kit/autograder/edition``, which the grader's manifest then reads."""
    from autograder.manifest import EDITION_FILE, ManifestError, load_manifest

    try:
        edition = load_manifest(kit / "autograder" / "manifest.toml", edition).edition
    except ManifestError as error:
        raise BundleError(str(error)) from error
    out = Path(out)
    if secret is not None and len(secret.strip()) < MIN_SECRET_CHARS:
        raise BundleError(f"the hidden seed must have at least {MIN_SECRET_CHARS} characters; got {len(secret.strip())}")
    seed = secret.strip() if secret is not None else secrets.token_urlsafe(24)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for name in ("setup.sh", "run_autograder"):
            _add(archive, GRADESCOPE / name, name)
        for relative in kit_files(kit):
            if relative.as_posix() in ("autograder/hidden_seed", f"autograder/{EDITION_FILE}"):
                continue  # a local copy never travels; the bundle's own is written below
            _add(archive, kit / relative, f"kit/{relative.as_posix()}")
        info = zipfile.ZipInfo(SEED_FILE, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o600 | stat.S_IFREG) << 16
        archive.writestr(info, seed + "\n")
        info = zipfile.ZipInfo(f"kit/autograder/{EDITION_FILE}", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o644 | stat.S_IFREG) << 16
        archive.writestr(info, edition + "\n")
    return out
