"""Read a Gradescope "Export Submissions" download: which folder holds whose submission.

Gradescope's export (a zip, or the folder it unpacks to) holds ``submission_metadata.yml`` and
one folder per submission, named like ``submission_123456789``. The metadata maps each folder
name to its submitters (several for a group submission), in Ruby-flavoured YAML whose keys
start with a colon::

    submission_123456789:
      :submitters:
      - :name: Ada Lovelace
        :sid: '05550123'
        :email: ada@stanford.edu
      :created_at: 2026-05-01 23:58:01.000000000 -07:00
      :score: 30.08

A submission folder holds the files the student uploaded (Gradescope unpacks an uploaded zip;
one that it could not unpack stays a ``.zip``, which the grader reads and refuses with a reason).

An export is untrusted input: its ids become folder names under the batch's ``--out``, and its
names reach a spreadsheet. So ``read_export`` refuses, before anything is graded, an export whose
ids are not plain folder names (``plain_id``: no ``/`` or ``\\``, not ``.`` or ``..``, no NUL or
control character, at most ``MAX_ID_CHARS`` characters) or that holds a symbolic link (a link
could point anywhere; Gradescope's export zip holds none, and the batch unpacks a zip itself
without creating any). The batch then reads only inside the export and writes only inside
``--out``; report.py escapes the CSV cells a spreadsheet would run as formulas.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

METADATA = "submission_metadata.yml"
MAX_ID_CHARS = 100  # Gradescope's ids are like submission_123456789; a name must also fit NAME_MAX
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ExportError(ValueError):
    """The path is not a Gradescope export (no submission_metadata.yml, or one that cannot be read)."""


@dataclass(frozen=True)
class Student:
    name: str
    sid: str
    email: str


@dataclass(frozen=True)
class Submission:
    """One exported submission: its folder name (``id``), its path, and who submitted it."""

    id: str
    path: Path
    students: tuple[Student, ...]
    created_at: str = ""

    @property
    def label(self) -> str:
        """Who submitted it, for progress lines and the leaderboard: the names, else the id."""
        names = ", ".join(student.name for student in self.students if student.name)
        return _CONTROL.sub("?", names or self.id)  # no terminal escape sequence reaches the console


def plain_id(key: object) -> str | None:
    """None when ``key`` (a metadata key or a folder name) is a plain folder name; else what is wrong."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        return f"a {type(key).__name__}, not a folder name"
    text = str(key)
    if text in ("", ".", ".."):
        return "empty" if not text else f"{text!r} names a folder itself, not a submission"
    if "/" in text or "\\" in text:
        return "holds a path separator"
    if _CONTROL.search(text):
        return "holds a NUL or control character"
    if len(text) > MAX_ID_CHARS:
        return f"is {len(text)} characters long (at most {MAX_ID_CHARS})"
    return None


def _shown(key: object) -> str:
    """``key`` for a message: quoted, control characters escaped, cut to 80 characters."""
    text = repr(str(key)) if isinstance(key, (str, int)) else repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def _links(root: Path) -> list[str]:
    """Every symbolic link under ``root`` (not followed), relative to it."""
    found = []
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            if os.path.islink(os.path.join(top, name)):
                found.append(os.path.relpath(os.path.join(top, name), root))
    return sorted(found)


def _plain(value) -> object:
    """A YAML value with Ruby-symbol keys (``:name``) turned into plain ones (``name``)."""
    if isinstance(value, dict):
        return {str(key).lstrip(":"): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _find_metadata(root: Path) -> Path:
    for depth in range(3):
        found = sorted(root.glob("/".join(["*"] * depth + [METADATA])))
        if found:
            return found[0]
    raise ExportError(f"{root} holds no {METADATA}: download the assignment's submissions from Gradescope "
                      "(Review Grades > Export Submissions) and pass that zip or the folder it unpacks to")


def unpack(export: Path, workdir: Path) -> Path:
    """The export's folder: ``export`` itself, or the zip unpacked under ``workdir`` (once)."""
    export = Path(export)
    if export.is_dir():
        return export
    if not zipfile.is_zipfile(export):
        raise ExportError(f"{export} is neither a folder nor a zip")
    target = Path(workdir) / "export"
    marker = target / ".unpacked"
    digest = hashlib.sha256(export.read_bytes()).hexdigest()
    if not (marker.exists() and marker.read_text() == digest):
        with zipfile.ZipFile(export) as archive:
            archive.extractall(target)  # member names are sanitised: no absolute or climbing paths
        marker.write_text(digest)
    return target


def read_export(export: Path, workdir: Path) -> list[Submission]:
    """Every submission of the export, in metadata order, then folders the metadata does not name."""
    import yaml

    root = unpack(export, workdir)
    links = _links(root) if not Path(root).is_symlink() else ["(the export folder itself)"]
    if links:
        raise ExportError(f"{root} holds symbolic links, which could point outside the export: "
                          f"{', '.join(_shown(link) for link in links[:10])}{' ...' if len(links) > 10 else ''}. "
                          "Gradescope's export holds none: pass the export zip itself (the batch unpacks it "
                          "without links), or remove the links")
    metadata_path = _find_metadata(root)
    try:
        metadata = _plain(yaml.safe_load(metadata_path.read_text(encoding="utf-8")) or {})
    except (OSError, yaml.YAMLError) as error:
        raise ExportError(f"cannot read {metadata_path}: {error}") from error
    if not isinstance(metadata, dict):
        raise ExportError(f"{metadata_path} is not a mapping of submission folders to their submitters")
    folder = metadata_path.parent
    refused = [f"{_shown(name)} ({why})" for name in metadata for why in [plain_id(name)] if why]
    ids = [str(name) for name in metadata]
    refused += [f"{_shown(name)} (named twice)" for name in sorted(set(ids)) if ids.count(name) > 1]
    refused += [f"folder {_shown(path.name)} ({why})" for path in sorted(folder.iterdir())
                if path.is_dir() and not path.name.startswith(".") and str(path.name) not in
                {str(name) for name in metadata} for why in [plain_id(path.name)] if why]
    if refused:
        raise ExportError(f"{metadata_path}: refusing the export, whose submission ids must be plain folder "
                          f"names (the batch writes one folder per id under --out): {'; '.join(refused)}. "
                          "Gradescope's ids look like submission_123456789: download the export again "
                          "(Review Grades > Export Submissions), or fix those keys")
    submissions = []
    for name, entry in metadata.items():
        entry = entry if isinstance(entry, dict) else {}
        students = tuple(Student(str(s.get("name") or ""), str(s.get("sid") or ""), str(s.get("email") or ""))
                         for s in entry.get("submitters") or [] if isinstance(s, dict))
        submissions.append(Submission(str(name), folder / str(name), students, str(entry.get("created_at") or "")))
    named = {submission.id for submission in submissions}
    for path in sorted(folder.iterdir()):
        if path.is_dir() and path.name not in named and not path.name.startswith("."):
            submissions.append(Submission(path.name, path, ()))
    return submissions
