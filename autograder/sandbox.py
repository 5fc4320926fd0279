"""Copy a submission into a fresh sandbox directory, keeping only what the tests may import.

Read by the grader (autograder/grade.py) and by staff who wonder why a student's file was
ignored. A submission is a directory, or a zip (as made by make_submission.sh), holding
``adapters.py`` and ``cs336_systems/``. Only ``adapters.py`` and ``cs336_systems/**/*.py``
are copied; everything else is left out and listed, so that nothing in a submission can act
as test configuration or shadow a library: no ``conftest.py``, ``pytest.ini``,
``pyproject.toml``, ``sitecustomize.py``, ``*.pth``, and no top-level ``torch.py`` or
``pytest/``. Symbolic links are followed only to files inside the submission or to the kit's
own student files (the provided ``cs336_systems`` modules), so a link cannot pull the hidden
tests or the reference into the sandbox.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

PACKAGE = "cs336_systems"
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 400
MAX_TOTAL_BYTES = 20 * 1024 * 1024
_NEVER_COPIED = {"conftest.py", "sitecustomize.py", "usercustomize.py"}
_MISSING_ADAPTERS = '''"""Written by the grader: this submission has no adapters.py."""
raise ImportError(
    "your submission has no adapters.py at its top level; submit the zip that "
    "make_submission.sh writes, which holds adapters.py and cs336_systems/"
)
'''


class SubmissionNotFound(ValueError):
    """The path is neither a directory nor a zip holding a submission."""


@dataclass
class SandboxReport:
    """What was copied into the sandbox, what was left out and why, and what the grader added."""

    root: Path
    copied: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)

    def summary(self, limit: int = 12) -> str:
        lines = [f"copied {len(self.copied)} file(s) from the submission"]
        if self.added:
            lines.append("added by the grader: " + ", ".join(self.added))
        if self.left_out:
            shown = self.left_out[:limit]
            more = f" (and {len(self.left_out) - limit} more)" if len(self.left_out) > limit else ""
            lines.append("left out (only adapters.py and cs336_systems/**/*.py are graded): " + "; ".join(shown) + more)
        return "\n".join(lines)


def _wanted(relative: PurePosixPath) -> str | None:
    """None when ``relative`` (a path inside the submission) is copied, else why it is left out."""
    parts = relative.parts
    if any(part in ("__pycache__", "__MACOSX") or part.startswith(".") for part in parts):
        return "cache or hidden file"
    if relative.name in _NEVER_COPIED or relative.suffix == ".pth":
        return "may configure or patch the test process"
    if parts == ("adapters.py",):
        return None
    if len(parts) >= 2 and parts[0] == PACKAGE and relative.suffix == ".py":
        return None
    return "not adapters.py or a .py file in cs336_systems/"


def _find_root(names: list[PurePosixPath]) -> PurePosixPath | None:
    """The folder (inside a zip or tree) that holds adapters.py or cs336_systems/, shallowest first."""
    candidates = []
    for name in names:
        if "__MACOSX" in name.parts:
            continue
        if name.name == "adapters.py":
            candidates.append(name.parent)
        elif PACKAGE in name.parts:
            candidates.append(PurePosixPath(*name.parts[: name.parts.index(PACKAGE)]))
    if not candidates:
        return None
    return min(candidates, key=lambda path: (len(path.parts), str(path)))


def _link_allowed(target: Path, roots: list[Path]) -> bool:
    return any(target == root or root in target.parents for root in roots)


def _write(dest: Path, relative: PurePosixPath, data: bytes) -> None:
    path = dest.joinpath(*relative.parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in [path.parent, *path.parent.parents]:
        if parent == dest or dest not in parent.parents:
            break
        parent.chmod(0o755)
    path.write_bytes(data)
    path.chmod(0o644)


def _from_zip(archive: Path, dest: Path, report: SandboxReport) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as error:
        raise SubmissionNotFound(f"{archive} is not a readable zip: {error}") from error
    with zf:
        infos = [info for info in zf.infolist() if not info.is_dir()]
        root = _find_root([PurePosixPath(info.filename) for info in infos])
        if root is None:
            raise SubmissionNotFound(f"{archive} holds no adapters.py and no {PACKAGE}/ folder")
        total = 0
        for info in infos:
            name = PurePosixPath(info.filename)
            if name.is_absolute() or ".." in name.parts:
                report.left_out.append(f"{info.filename} (unsafe path)")
                continue
            try:
                relative = name.relative_to(root)
            except ValueError:
                report.left_out.append(f"{info.filename} (outside the submission folder {root})")
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                report.left_out.append(f"{relative} (symbolic link)")
                continue
            why = _wanted(relative)
            if why is None and info.file_size > MAX_FILE_BYTES:
                why = f"larger than {MAX_FILE_BYTES // 1024} KiB"
            if why is None and (len(report.copied) >= MAX_FILES or total + info.file_size > MAX_TOTAL_BYTES):
                why = "over the submission size limit"
            if why is not None:
                report.left_out.append(f"{relative} ({why})")
                continue
            data = zf.read(info)[: MAX_FILE_BYTES + 1]
            if len(data) > MAX_FILE_BYTES:
                report.left_out.append(f"{relative} (larger than {MAX_FILE_BYTES // 1024} KiB)")
                continue
            total += len(data)
            _write(dest, relative, data)
            report.copied.append(str(relative))


def _copy_file(path: Path, relative: PurePosixPath, dest: Path, report: SandboxReport, allowed: list[Path]) -> None:
    why = _wanted(relative)
    if why is None and path.is_symlink() and not _link_allowed(path.resolve(), allowed):
        why = "symbolic link to a file outside the submission"
    if why is None and not path.is_file():
        why = "not a regular file"
    size = path.stat().st_size if why is None else 0
    if why is None and size > MAX_FILE_BYTES:
        why = f"larger than {MAX_FILE_BYTES // 1024} KiB"
    copied_bytes = sum((dest / name).stat().st_size for name in report.copied)
    if why is None and (len(report.copied) >= MAX_FILES or copied_bytes + size > MAX_TOTAL_BYTES):
        why = "over the submission size limit"
    if why is not None:
        if "__pycache__" not in relative.parts:
            report.left_out.append(f"{relative} ({why})")
        return
    _write(dest, relative, path.read_bytes())
    report.copied.append(str(relative))


def _from_tree(source: Path, dest: Path, report: SandboxReport, link_roots: list[Path]) -> None:
    allowed = [source.resolve(), *[root.resolve() for root in link_roots]]
    for entry in sorted(source.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.name == "adapters.py":
            _copy_file(entry, PurePosixPath(entry.name), dest, report, allowed)
        elif entry.name == PACKAGE and entry.is_dir():
            if entry.is_symlink() and not _link_allowed(entry.resolve(), allowed):
                report.left_out.append(f"{PACKAGE}/ (symbolic link to a folder outside the submission)")
                continue
            for dirpath, dirnames, filenames in os.walk(entry, followlinks=False):
                here = Path(dirpath)
                kept = []
                for name in sorted(dirnames):
                    sub = here / name
                    if name == "__pycache__" or name.startswith("."):
                        continue
                    if sub.is_symlink() and not _link_allowed(sub.resolve(), allowed):
                        report.left_out.append(f"{sub.relative_to(source)}/ (symbolic link outside the submission)")
                        continue
                    kept.append(name)
                dirnames[:] = kept
                for filename in sorted(filenames):
                    path = here / filename
                    relative = PurePosixPath(PACKAGE, *path.relative_to(entry).parts)
                    _copy_file(path, relative, dest, report, allowed)
        else:
            report.left_out.append(f"{entry.name}{'/' if entry.is_dir() else ''} (not adapters.py or cs336_systems/)")


def locate_submission(path: Path) -> Path:
    """The directory or zip to grade, given what was uploaded (a directory, a zip, or a directory
    holding nothing but one zip, which is how some upload tools leave it)."""
    path = Path(path)
    if path.is_file() and zipfile.is_zipfile(path):
        return path
    if not path.is_dir():
        raise SubmissionNotFound(f"{path} is neither a directory nor a zip file")
    entries = [entry for entry in path.iterdir() if not entry.name.startswith(".")]
    if not (path / "adapters.py").exists() and not (path / PACKAGE).exists():
        zips = [entry for entry in entries if entry.suffix == ".zip" and entry.is_file()]
        if len(zips) == 1:
            return zips[0]
        subdirs = [entry for entry in entries if entry.is_dir()]
        for sub in subdirs:
            if (sub / "adapters.py").exists() or (sub / PACKAGE).exists():
                return sub
    return path


def build_sandbox(submission: Path, dest: Path, *, link_roots: list[Path] = ()) -> SandboxReport:
    """Copy ``submission`` (directory or zip) into the empty directory ``dest``; see the module docstring.

    ``link_roots`` are extra directories that symbolic links in the submission may point into
    (the kit's own ``cs336_systems/``, which the reference shares files with).
    Raises SubmissionNotFound when ``submission`` holds no submission at all.
    """
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    report = SandboxReport(root=dest)
    source = locate_submission(submission)
    if source.is_file():
        _from_zip(source, dest, report)
    else:
        _from_tree(source, dest, report, list(link_roots))
    if not (dest / "adapters.py").exists():
        _write(dest, PurePosixPath("adapters.py"), _MISSING_ADAPTERS.encode())
        report.added.append("adapters.py (an import error: the submission has none)")
    if not (dest / PACKAGE / "__init__.py").exists():
        _write(dest, PurePosixPath(PACKAGE, "__init__.py"), b"")
        report.added.append(f"{PACKAGE}/__init__.py (empty)")
    return report
