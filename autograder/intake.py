"""The grader's intake: copy an upload (a submission folder or zip) into a fresh folder, keeping
only what the tests may import.

Read by the grader (autograder/grade.py) and by staff who wonder why a student's file was
ignored. A submission is a directory, or a zip (as made by make_submission.sh), holding
``adapters.py`` and ``cs336_systems/``. What counts as one of its files, the size limits and
where a symbolic link may point are defined once, in ``harness/submission.py`` (which the
leaderboard reads submissions with too): ``adapters.py``, ``cs336_systems/**/*.py`` and small
data files under ``cs336_systems/`` (``.json``, ``.toml``, ``.yaml``/``.yml``, ``.txt``,
``.cfg``; at most 1 MiB each, written without execute permission) are copied; ``.py`` is the
only code. Everything else is left out and listed, so that nothing in a submission can act as
test configuration or shadow a library: no ``conftest.py``, ``pytest.ini``, ``pyproject.toml``,
``setup.cfg``, ``sitecustomize.py``, ``*.pth``, and no top-level ``torch.py`` or ``pytest/``.
Symbolic links are followed only to files inside the submission or to the kit's own student
files (the provided ``cs336_systems`` modules), so a link cannot pull the hidden tests or the
reference into the copy. A directory is read by ``harness/submission.py``'s reader; this
module adds the reading of a zip.

A zip is read as hostile input (the grader runs as root, before any test process drops its
rights), and its headers are never trusted:

- its central directory must fit in ``MAX_DIRECTORY_BYTES`` (checked from the end record before
  the directory is parsed) and hold at most ``MAX_ENTRIES`` entries;
- only stored and deflated entries are read (bzip2 and lzma cannot be decompressed in bounded
  steps), never an encrypted one, and only the entries that would be copied;
- each entry is streamed to disk ``CHUNK_BYTES`` at a time while the bytes actually written are
  counted: at most the file's own limit (``size_limit``: 2 MiB for a ``.py`` file, 1 MiB for a
  data file), ``MAX_TOTAL_BYTES`` for everything, and at most ``MAX_RATIO`` times an entry's
  compressed size once it passes ``RATIO_FLOOR_BYTES``; the declared sizes are checked first too,
  so an honest bomb is refused before anything is written;
- entry names that are absolute, climb out (``..``), hold control characters, or are longer
  than ``MAX_NAME_CHARS`` or deeper than ``MAX_DEPTH`` are left out (listed), as are duplicates.

A zip that cannot be read (bad CRC, truncated, not a zip, bad header, unsupported compression,
encrypted) or that breaks a limit raises SubmissionRejected, whose text tells the student what
is wrong and how to fix it, and the folder is left empty; the grader then writes a results.json
that scores 0 with that text (autograder/grade.py). An entry that is honest but larger than its
per-file limit is only left out, and the rest is graded.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.submission import (
    DATA_SUFFIXES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    PACKAGE,
    SubmissionNotFound,
    locate_submission,
    read_submission,
    size_limit,
    size_text,
    wanted,
)

MAX_ENTRIES = 5000  # entries of a zip, copied or not
MAX_DIRECTORY_BYTES = 2 * 1024 * 1024  # a zip's central directory
MAX_RATIO = 200  # uncompressed / compressed size of one zip entry ...
RATIO_FLOOR_BYTES = 1024 * 1024  # ... once the entry is larger than this
MAX_NAME_CHARS = 400  # a zip entry's name
MAX_DEPTH = 24  # folders in a zip entry's name
CHUNK_BYTES = 64 * 1024  # read and written at a time
_READABLE_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_METHOD_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma", 9: "deflate64"}
_FIX = "Re-create it with `bash make_submission.sh` and upload the new submission.zip."
_MISSING_ADAPTERS = '''"""Written by the grader: this submission has no adapters.py."""
raise ImportError(
    "your submission has no adapters.py at its top level; submit the zip that "
    "make_submission.sh writes, which holds adapters.py and cs336_systems/"
)
'''


class SubmissionRejected(ValueError):
    """The zip is corrupt or breaks a limit; ``str(error)`` is the whole message for the student.

    ``report`` says what had been seen when it was rejected (its ``copied`` is empty: the
    folder is emptied).
    """

    def __init__(self, message: str, report: IntakeReport | None = None):
        super().__init__(message)
        self.report = report


def _corrupt(detail: str) -> SubmissionRejected:
    return SubmissionRejected(f"your zip is corrupt: {detail}. {_FIX}")


def _too_large(detail: str) -> SubmissionRejected:
    return SubmissionRejected(
        f"{detail}. A submission is adapters.py and cs336_systems/ (.py files and small data files); "
        f"leave out checkpoints, profiles, caches and virtual environments. {_FIX}")


@dataclass
class IntakeReport:
    """What was copied into the folder, what was left out and why, and what the grader added."""

    root: Path
    copied: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    no_adapters: bool = False  # the submission had no adapters.py: every test fails importing it
    # Those of left_out that are the submission's own files but break a rule (a symbolic link out
    # of it, larger than its limit, over the file count): graded without; the leaderboard refuses.
    broken: list[str] = field(default_factory=list)

    def leave_out(self, entry: str, broken: bool) -> None:
        self.left_out.append(entry)
        if broken:
            self.broken.append(entry)

    @property
    def data_files(self) -> list[str]:
        """The copied files that are data, not code (see DATA_SUFFIXES)."""
        return [name for name in self.copied if name.endswith(DATA_SUFFIXES)]

    def summary(self, limit: int = 12) -> str:
        lines = [f"copied {len(self.copied)} file(s) from the submission"]
        if self.data_files:
            shown = self.data_files[:limit]
            more = f" (and {len(self.data_files) - limit} more)" if len(self.data_files) > limit else ""
            lines.append("data files among them (read-only, never imported): " + ", ".join(shown) + more)
        if self.added:
            lines.append("added by the grader: " + ", ".join(self.added))
        if self.left_out:
            shown = self.left_out[:limit]
            more = f" (and {len(self.left_out) - limit} more)" if len(self.left_out) > limit else ""
            lines.append("left out (only adapters.py, cs336_systems/**/*.py and small data files in cs336_systems/ "
                         "are graded): " + "; ".join(shown) + more)
        return "\n".join(lines)


def _unsafe_name(name: str) -> str | None:
    """Why a zip entry name (with / separators) must not be used as a path, or None."""
    if len(name) > MAX_NAME_CHARS:
        return f"a name longer than {MAX_NAME_CHARS} characters"
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        return "a name with control characters"
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        return "an absolute path or one that leaves the submission folder"
    if len(path.parts) > MAX_DEPTH:
        return f"more than {MAX_DEPTH} folders deep"
    if any(len(part.encode()) > 255 for part in path.parts):
        return "a file name longer than 255 bytes"
    return None


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


def _open_new(dest: Path, relative: PurePosixPath):
    """A new file ``dest/relative`` (mode 0644, folders 0755) open for binary writing.

    Never follows a link and never replaces a file: the folder holds only what this module made.
    Raises OSError when the path is taken (say, by a folder of the same name).
    """
    path = dest.joinpath(*relative.parts)
    folder = dest
    for part in relative.parts[:-1]:
        folder = folder / part
        if not folder.is_dir() or folder.is_symlink():
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.fchmod(fd, 0o644)
    return os.fdopen(fd, "wb")


def _write(dest: Path, relative: PurePosixPath, data: bytes) -> None:
    with _open_new(dest, relative) as file:
        file.write(data)


def _check_directory(archive: Path) -> None:
    """Refuse a zip whose central directory is too large to parse, before zipfile parses it."""
    end_record = getattr(zipfile, "_EndRecData", None)
    index = getattr(zipfile, "_ECD_SIZE", None)
    if end_record is None or index is None:  # a Python without it: the entry count check still holds
        return
    with archive.open("rb") as file:
        record = end_record(file)
    if record is None:
        raise _corrupt("it has no end-of-archive record (not a zip file, or the upload was cut short)")
    if record[index] > MAX_DIRECTORY_BYTES:
        raise _too_large(f"your zip's list of files takes {record[index] // 1024} KiB, more than the "
                         f"{MAX_DIRECTORY_BYTES // 1024} KiB allowed (it holds far too many files)")


def _plan_zip(zf: zipfile.ZipFile, report: IntakeReport) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """The entries to extract, with their paths in the folder; the others are listed as left out.

    Raises SubmissionRejected when the zip breaks a limit by its own account (entry count,
    total declared size, declared compression ratio, a compression method or encryption that
    cannot be read).
    """
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise _too_large(f"your zip holds {len(infos)} entries, more than the {MAX_ENTRIES} allowed")
    named = []
    for info in infos:
        name = info.filename.replace("\\", "/")
        if info.is_dir() or name.endswith("/"):
            continue
        why = _unsafe_name(name)
        if why is not None:
            report.left_out.append(f"{name[:120]!r} (unsafe path: {why})")
            continue
        named.append((info, PurePosixPath(name)))
    root = _find_root([name for _, name in named])
    if root is None:
        raise SubmissionNotFound(f"{zf.filename} holds no adapters.py and no {PACKAGE}/ folder")
    chosen, seen, declared = [], set(), 0
    for info, name in named:
        try:
            relative = name.relative_to(root)
        except ValueError:
            report.left_out.append(f"{name} (outside the submission folder {root})")
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            report.leave_out(f"{relative} (symbolic link)", broken=wanted(relative) is None)
            continue
        why = wanted(relative)
        if why is None and relative in seen:
            why = "a second entry of the same name (the first is used)"
        bomb = info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1)
        if why is None and bomb:
            raise _too_large(f"your zip looks like a zip bomb: {relative} expands from {info.compress_size / 1e6:.2f} "
                             f"MB to {info.file_size / 1e6:.0f} MB, more than the {MAX_RATIO} times allowed")
        too_large = why is None and info.file_size > size_limit(relative)
        if too_large:
            why = f"larger than {size_text(size_limit(relative))}"
        if why is not None:
            report.leave_out(f"{relative} ({why})", broken=too_large)
            continue
        if info.flag_bits & 0x1:
            raise SubmissionRejected(f"your zip is encrypted ({relative} needs a password), so the grader cannot "
                                     f"read it. {_FIX}")
        if info.compress_type not in _READABLE_METHODS:
            method = _METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
            raise SubmissionRejected(f"your zip cannot be read: {relative} is compressed with {method}, which the "
                                     "grader does not read (only stored and deflated entries, as every common zip "
                                     f"tool writes). {_FIX}")
        if len(chosen) >= MAX_FILES:
            report.leave_out(f"{relative} (over the limit of {MAX_FILES} files)", broken=True)
            continue
        seen.add(relative)
        declared += info.file_size
        chosen.append((info, relative))
    if declared > MAX_TOTAL_BYTES:
        raise _too_large(f"your zip expands to more than {MAX_TOTAL_BYTES // (1024 * 1024)} MB of graded files "
                         f"({declared / 1e6:.0f} MB by its own headers)")
    return chosen


def _inflated(inflater, raw: bytes) -> Iterator[tuple[bytes, int]]:
    """What ``inflater`` makes of ``raw``, at most CHUNK_BYTES at a time however much it expands,
    each piece with the number of bytes of ``raw`` not yet consumed; stops at the stream's end."""
    while True:
        before = len(raw)
        out = inflater.decompress(raw, CHUNK_BYTES)
        raw = inflater.unconsumed_tail
        if out:
            yield out, len(raw)
        if inflater.eof or (not raw and len(out) < CHUNK_BYTES) or (not out and len(raw) >= before > 0):
            return


def _entry_chunks(file, info: zipfile.ZipInfo, relative: PurePosixPath) -> Iterator[tuple[bytes, int]]:
    """The entry's uncompressed bytes, at most CHUNK_BYTES at a time, each with the number of
    compressed bytes consumed so far; read from ``file`` (the zip, opened in binary) by this module,
    not by zipfile, so that no header size is trusted.

    Raises SubmissionRejected (corrupt) when the local header is wrong, the data ends early or
    goes on past the end of its stream, the deflate data is invalid, or the CRC or the size
    differs from the central directory's.
    """
    file.seek(info.header_offset)
    header = file.read(30)
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        raise _corrupt(f"the entry {relative} has a bad header (no local file header where the directory points)")
    name_bytes, extra_bytes = struct.unpack("<HH", header[26:30])
    file.seek(info.header_offset + 30 + name_bytes + extra_bytes)
    inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    left, crc, produced = info.compress_size, 0, 0
    try:
        while left > 0:
            raw = file.read(min(CHUNK_BYTES, left))
            if not raw:
                raise _corrupt(f"{relative} is cut short (the zip ends inside it; was the upload interrupted?)")
            left -= len(raw)
            if inflater is not None and inflater.eof:
                raise _corrupt(f"{relative} has data after the end of its compressed stream")
            for out, unread in ([(raw, 0)] if inflater is None else _inflated(inflater, raw)):
                produced += len(out)
                crc = zlib.crc32(out, crc)
                yield out, info.compress_size - left - unread
    except zlib.error as error:
        raise _corrupt(f"{relative} cannot be decompressed ({error})") from error
    if inflater is not None and info.compress_size > 0 and (
            not inflater.eof or inflater.unused_data or inflater.unconsumed_tail):
        raise _corrupt(f"{relative} is cut short or padded (its compressed stream does not end where its header "
                       "says)")
    if produced != info.file_size:
        raise _corrupt(f"{relative} holds {produced} bytes, but its header says {info.file_size}")
    if crc != info.CRC:
        raise _corrupt(f"bad CRC-32 for {relative} (its bytes were damaged)")


def _extract(file, info: zipfile.ZipInfo, relative: PurePosixPath, dest: Path, total: int) -> int:
    """Stream one entry into ``dest/relative``, counting the bytes written; returns their number.

    Raises SubmissionRejected when the entry cannot be read (see _entry_chunks), or when the
    bytes it actually yields break a limit: more than its header says, more than its own size
    limit, more than MAX_RATIO times the compressed bytes read once past RATIO_FLOOR_BYTES, or
    ``total`` plus them over MAX_TOTAL_BYTES. OSError: the path cannot be written (nothing is
    left of it).
    """
    limit = size_limit(relative)
    written = 0
    path = dest.joinpath(*relative.parts)
    with _open_new(dest, relative) as target:
        try:
            for chunk, consumed in _entry_chunks(file, info, relative):
                written += len(chunk)
                if written > info.file_size or written > limit:
                    raise _corrupt(f"{relative} holds more bytes than its header says ({info.file_size})")
                if written > RATIO_FLOOR_BYTES and written > MAX_RATIO * max(consumed, 1):
                    raise _too_large(f"your zip looks like a zip bomb: {relative} expands more than {MAX_RATIO} times")
                if total + written > MAX_TOTAL_BYTES:
                    raise _too_large(f"your zip expands to more than {MAX_TOTAL_BYTES // (1024 * 1024)} MB "
                                     "of graded files")
                target.write(chunk)
        except OSError:
            path.unlink(missing_ok=True)
            raise
    return written


def _from_zip(archive: Path, dest: Path, report: IntakeReport) -> None:
    """Extract the wanted entries of ``archive`` (see the module docstring for the limits)."""
    try:
        _check_directory(archive)
        zf = zipfile.ZipFile(archive)
    except SubmissionRejected:
        raise
    except zipfile.BadZipFile as error:
        raise _corrupt(f"{error} (not a zip file, or the upload was cut short)") from error
    except Exception as error:  # noqa: BLE001 - zipfile raises many kinds on a malformed directory
        raise _corrupt(f"its list of files cannot be read ({type(error).__name__}: {error})") from error
    with zf, archive.open("rb") as file:
        chosen = _plan_zip(zf, report)
        total = 0
        for info, relative in chosen:
            try:
                total += _extract(file, info, relative, dest, total)
            except OSError as error:  # the path is taken (a file and a folder of one name)
                report.left_out.append(f"{relative} (cannot be written: {error.strerror or error})")
                continue
            report.copied.append(str(relative))


def _from_tree(source: Path, dest: Path, report: IntakeReport, link_roots: list[Path]) -> None:
    """Copy what ``harness/submission.py``'s reader reads of the directory ``source``; list the rest."""
    read = read_submission(source, link_roots)
    for relative, data in read.files.items():
        _write(dest, PurePosixPath(relative), data)
        report.copied.append(relative)
    report.left_out.extend(read.left_out)
    report.broken.extend(read.broken)


def _empty(folder: Path) -> None:
    for entry in list(folder.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def copy_submission(submission: Path, dest: Path, *, link_roots: list[Path] = ()) -> IntakeReport:
    """Copy ``submission`` (directory or zip) into the empty directory ``dest``; see the module docstring.

    ``link_roots`` are extra directories that symbolic links in the submission may point into
    (the kit's own ``cs336_systems/``, which the reference shares files with).
    Raises SubmissionNotFound when ``submission`` holds no submission at all, and
    SubmissionRejected (with ``dest`` left empty) when it is a zip that is corrupt or breaks a
    limit.
    """
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    report = IntakeReport(root=dest)
    source = locate_submission(submission)
    if source.is_file():
        try:
            _from_zip(source, dest, report)
        except SubmissionRejected as error:
            _empty(dest)
            report.copied.clear()
            error.report = report
            raise
    else:
        _from_tree(source, dest, report, list(link_roots))
    if not (dest / "adapters.py").exists():
        _write(dest, PurePosixPath("adapters.py"), _MISSING_ADAPTERS.encode())
        report.added.append("adapters.py (an import error: the submission has none)")
        report.no_adapters = True
    if not (dest / PACKAGE / "__init__.py").exists():
        _write(dest, PurePosixPath(PACKAGE, "__init__.py"), b"")
        report.added.append(f"{PACKAGE}/__init__.py (empty)")
    return report
