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

The GPU batch after the deadline must grade with that same secret (it chooses the hidden cases
and every visible example): ``python -m autograder batch EXPORT --bundle ZIP`` reads it back
with ``bundle_secret``, and ``course_secret_for_batch`` says where to find it when it is missing.
"""

from __future__ import annotations

import hashlib
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


def bundle_secret(bundle: Path) -> str:
    """The hidden seed embedded in the bundle zip ``bundle`` (its ``SEED_FILE``). BundleError, saying
    what is wrong, when the file is not a zip or holds no seed."""
    bundle = Path(bundle)
    try:
        with zipfile.ZipFile(bundle) as archive:
            secret = archive.read(SEED_FILE).decode("utf-8").strip()
    except FileNotFoundError:
        raise BundleError(f"{bundle}: no such file; pass the zip that `python -m autograder bundle` wrote (by "
                          "default dist/gradescope_autograder.zip), the one uploaded to Gradescope") from None
    except KeyError:
        raise BundleError(f"{bundle} holds no {SEED_FILE}: it is not a bundle that `python -m autograder bundle` "
                          "wrote") from None
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise BundleError(f"{bundle}: cannot read it as the Gradescope bundle zip ({error})") from None
    if len(secret) < MIN_SECRET_CHARS:
        raise BundleError(f"{bundle}: its {SEED_FILE} holds {len(secret)} characters, fewer than "
                          f"{MIN_SECRET_CHARS}; rebuild the bundle")
    return secret


NO_SECRET = ("no course secret: the grades would use the kit's default secret, not the one your Gradescope "
             "autograder grades with, so hidden cases and visible examples (and verdicts) would differ from "
             "Gradescope's. The secret is in the bundle you uploaded (dist/gradescope_autograder.zip unless "
             "`bundle --out` said otherwise), as " + SEED_FILE + ": pass --bundle ZIP (or --secret, or set "
             "$CS336_HIDDEN_SEED to the output of `unzip -p ZIP " + SEED_FILE + "`)")


def course_secret_for_batch(bundle: Path | None, secret: str | None, environ=os.environ) -> str:
    """The course secret a batch grades with: the ``bundle`` zip's, else ``secret``, else
    ``$CS336_HIDDEN_SEED``. BundleError (NO_SECRET: where the secret is) when none is given,
    when two disagree, or when one is too short."""
    given = {}
    if bundle is not None:
        given["--bundle"] = bundle_secret(bundle)
    if secret is not None:
        given["--secret"] = secret.strip()
    if environ.get("CS336_HIDDEN_SEED"):
        given["$CS336_HIDDEN_SEED"] = environ["CS336_HIDDEN_SEED"].strip()
    if not given:
        raise BundleError(NO_SECRET)
    if len(set(given.values())) > 1:
        raise BundleError(f"{' and '.join(given)} give different course secrets; keep the one Gradescope grades "
                          "with (the bundle's)")
    name, value = next(iter(given.items()))
    if len(value) < MIN_SECRET_CHARS:
        raise BundleError(f"{name}: the course secret must have at least {MIN_SECRET_CHARS} characters")
    return value


def secret_digest(secret: str) -> str:
    """A short one-way digest of the course secret, for records that must tell secrets apart (the
    batch's resume key) without holding the secret."""
    return hashlib.sha256(f"cs336-course-secret/{secret}".encode()).hexdigest()[:16]
