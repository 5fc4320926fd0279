"""What a submission is, defined once: which files count, how they are read, its hash, how its code is loaded.

A submission is a directory that holds ``adapters.py`` and ``cs336_systems/``. The student's
checkout is one, the staff solution is another, and every buggy or cheating variant the grader
is tested with is another. Tests reach student code only through the ``adapters`` module
``load_adapters`` returns, never by importing ``cs336_systems`` themselves.

Read by everyone who handles a submission, and by students who wonder why a file was not graded:

- **policy** (``wanted``, ``size_limit``, the ``MAX_*`` limits): a submission is ``adapters.py``,
  ``cs336_systems/**/*.py`` and small data files under ``cs336_systems/`` (``DATA_SUFFIXES``);
  nothing that could configure pytest or Python (``conftest.py``, ``pyproject.toml``,
  ``sitecustomize.py``, ``*.pth``, ...), no cache or hidden file;
- **reader** (``read_submission``): its files' bytes, read once, never following a symbolic link
  out of the submission (only into it, or into roots the caller names: the kit's own student
  files, which the staff solution shares), each file within its size limit. What is left out is
  listed with why; ``SubmissionFiles.whole`` turns a file of the submission that breaks a rule
  into an error that names it and the fix. The grader copies what it reads into its sandbox and
  grades the rest (its intake adds the reading of a zip); the leaderboard refuses to time a
  submission with such a file;
- **hash** (``files_hash``, ``submission_hash``): a submission's identity in the leaderboard's
  records and in the grading and leaderboard batches' caches;
- **loader** (``load_adapters``): imports its code into this process.

Why here: this is the one module that every party may import. Students receive ``tests/``
(``make_submission.sh`` packs what this reader reads) but never the grader's code; the
leaderboard's worker gets a copy of this file and nothing of the grader. The executor may
import only its own package and ``confine``, so the import step itself is
``executor/loading.py``, which this module builds on. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import ModuleType

from executor.loading import import_submission

ENV_VAR = "CS336_SUBMISSION"
ADAPTERS = "adapters.py"
PACKAGE = "cs336_systems"
KIT_FILES = (ADAPTERS, PACKAGE)  # the kit's student files, which a submission's links may point to
MAX_FILE_BYTES = 2 * 1024 * 1024  # one .py file
MAX_DATA_BYTES = 1024 * 1024  # one data file under cs336_systems/
MAX_FILES = 400  # files read
MAX_TOTAL_BYTES = 20 * 1024 * 1024  # all files read together
DATA_SUFFIXES = (".json", ".toml", ".yaml", ".yml", ".txt", ".cfg")
NEVER_READ = {
    "conftest.py", "sitecustomize.py", "usercustomize.py",  # imported by pytest or Python at startup
    "pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", "pyvenv.cfg",  # configure pytest or Python
}
RULES = (f"a submission's files must be regular files inside it (replace a symbolic link by the file it points "
         f"to: cp --remove-destination \"$(readlink -f FILE)\" FILE), each .py file at most "
         f"{MAX_FILE_BYTES // (1024 * 1024)} MiB and each data file at most {MAX_DATA_BYTES // (1024 * 1024)} MiB, "
         f"at most {MAX_FILES} files and {MAX_TOTAL_BYTES // (1024 * 1024)} MiB in all")


class SubmissionError(RuntimeError):
    """The submission directory is missing something, a file of it breaks the rules, or its code fails to import."""


class SubmissionNotFound(ValueError):
    """The path is neither a directory nor a zip holding a submission."""


# -- policy ---------------------------------------------------------------------------------


def wanted(relative: PurePosixPath) -> str | None:
    """None when ``relative`` (a path inside the submission) is one of its files, else why it is not."""
    parts = relative.parts
    if any(part in ("__pycache__", "__MACOSX") or part.startswith(".") for part in parts):
        return "cache or hidden file"
    if relative.name in NEVER_READ or relative.suffix == ".pth":
        return "may configure or patch the test process"
    if parts == (ADAPTERS,):
        return None
    if len(parts) >= 2 and parts[0] == PACKAGE and relative.suffix in (".py", *DATA_SUFFIXES):
        return None
    return f"not adapters.py, a .py file or a {'/'.join(DATA_SUFFIXES)} data file in cs336_systems/"


def size_limit(relative: PurePosixPath) -> int:
    """The most bytes the file ``relative`` (a wanted path) may hold."""
    return MAX_FILE_BYTES if relative.suffix == ".py" else MAX_DATA_BYTES


def size_text(size: int) -> str:
    """A limit in bytes as a reader says it: ``2 MiB``, ``512 KiB``."""
    return f"{size // (1024 * 1024)} MiB" if size % (1024 * 1024) == 0 else f"{size // 1024} KiB"


def kit_link_roots(kit: Path) -> list[Path]:
    """The kit's own student files, where a submission's symbolic links may point (the reference's do)."""
    return [Path(kit) / name for name in KIT_FILES]


def _link_allowed(target: Path, roots: list[Path]) -> bool:
    return any(target == root or root in target.parents for root in roots)


def locate_submission(path: Path) -> Path:
    """The directory or zip to read, given what was uploaded (a directory, a zip, or a directory
    holding nothing but one zip, which is how some upload tools leave it).

    A regular file is always taken for a zip (reading it says whether it is one). Raises
    SubmissionNotFound when ``path`` is neither a directory nor a file.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise SubmissionNotFound(f"{path} is neither a directory nor a zip file")
    entries = [entry for entry in path.iterdir() if not entry.name.startswith(".")]
    if not (path / ADAPTERS).exists() and not (path / PACKAGE).exists():
        zips = [entry for entry in entries if entry.suffix == ".zip" and entry.is_file()]
        if len(zips) == 1:
            return zips[0]
        subdirs = [entry for entry in entries if entry.is_dir()]
        for sub in subdirs:
            if (sub / ADAPTERS).exists() or (sub / PACKAGE).exists():
                return sub
    return path


# -- reader ---------------------------------------------------------------------------------


@dataclass
class SubmissionFiles:
    """A submission as ``read_submission`` read it.

    ``files``: relative path (``/``-separated) -> bytes, for each file of the submission that was read.
    ``left_out``: ``"path (why)"`` for each file or folder not read (cache folders are not listed).
    ``broken``: those of ``left_out`` that are the submission's own files but break a rule
    (a link out of it, larger than its limit, not a regular file, over the count or total size).
    """

    root: Path
    files: dict[str, bytes] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    def whole(self) -> dict[str, bytes]:
        """``files``, when no file of the submission was left out; else raises SubmissionError naming each and the fix."""
        refuse_broken(self.root, self.broken)
        return self.files

    def _leave_out(self, relative: PurePosixPath | str, why: str, broken: bool) -> None:
        entry = f"{relative} ({why})"
        self.left_out.append(entry)
        if broken:
            self.broken.append(entry)


def refuse_broken(where: Path | str, broken: list[str]) -> None:
    """Raise SubmissionError when ``broken`` (``"path (why)"`` of files of the submission at
    ``where`` that break a rule) is not empty: its text names each file and says how to fix it."""
    if broken:
        more = f" (and {len(broken) - 12} more)" if len(broken) > 12 else ""
        raise SubmissionError(f"{where}: {len(broken)} file(s) of the submission break its rules: "
                              f"{'; '.join(broken[:12])}{more}. Fix them and run again: {RULES}")


def _read_file(path: Path, relative: PurePosixPath, read: SubmissionFiles, allowed: list[Path], total: list[int]) -> None:
    why = wanted(relative)
    if why is not None:
        if "__pycache__" not in relative.parts:
            read._leave_out(relative, why, broken=False)
        return
    limit = size_limit(relative)
    if path.is_symlink() and not _link_allowed(path.resolve(), allowed):
        why = "symbolic link to a file outside the submission"
    elif not path.is_file():
        why = "not a regular file"
    elif path.stat().st_size > limit:
        why = f"larger than {size_text(limit)}"
    elif len(read.files) >= MAX_FILES or total[0] + path.stat().st_size > MAX_TOTAL_BYTES:
        why = "over the submission size limit"
    if why is None:
        with path.open("rb") as source:
            data = source.read(limit + 1)  # the file may have grown since stat
        if len(data) > limit:
            why = f"larger than {size_text(limit)}"
    if why is not None:
        read._leave_out(relative, why, broken=True)
        return
    read.files[relative.as_posix()] = data
    total[0] += len(data)


def read_submission(directory: Path, link_roots: Iterable[Path] = ()) -> SubmissionFiles:
    """Read the files of the submission in ``directory`` (see the module docstring for which).

    Symbolic links are followed only to files inside ``directory`` or inside ``link_roots``
    (extra directories or files, e.g. ``kit_link_roots``); a folder linked from outside is not
    entered. Nothing is raised for a file left out; ``SubmissionFiles.whole`` does that.
    """
    source = Path(directory)
    read = SubmissionFiles(root=source)
    allowed = [source.resolve(), *[Path(root).resolve() for root in link_roots]]
    total = [0]
    for entry in sorted(source.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.name == ADAPTERS:
            _read_file(entry, PurePosixPath(entry.name), read, allowed, total)
        elif entry.name == PACKAGE and entry.is_dir():
            if entry.is_symlink() and not _link_allowed(entry.resolve(), allowed):
                read._leave_out(f"{PACKAGE}/", "symbolic link to a folder outside the submission", broken=True)
                continue
            for dirpath, dirnames, filenames in os.walk(entry, followlinks=False):
                here = Path(dirpath)
                kept = []
                for name in sorted(dirnames):
                    sub = here / name
                    if name == "__pycache__" or name.startswith("."):
                        continue
                    if sub.is_symlink() and not _link_allowed(sub.resolve(), allowed):
                        read._leave_out(f"{sub.relative_to(source)}/", "symbolic link outside the submission",
                                        broken=True)
                        continue
                    kept.append(name)
                dirnames[:] = kept
                for filename in sorted(filenames):
                    path = here / filename
                    _read_file(path, PurePosixPath(PACKAGE, *path.relative_to(entry).parts), read, allowed, total)
        else:
            read._leave_out(f"{entry.name}{'/' if entry.is_dir() else ''}", "not adapters.py or cs336_systems/",
                            broken=False)
    return read


# -- hash -----------------------------------------------------------------------------------


def files_hash(files: Mapping[str, bytes]) -> str:
    """sha256 over each file's relative path and contents, in sorted order."""
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(relative.encode() + b"\0")
        digest.update(files[relative] + b"\0")
    return digest.hexdigest()


def submission_hash(path: Path, link_roots: Iterable[Path] = ()) -> str:
    """The submission's identity, for records and caches: ``files_hash`` of what ``read_submission``
    reads. An upload that is a zip (or a folder holding only one, see ``locate_submission``)
    hashes as that one file, under its name; a path that holds nothing hashes as no files.
    """
    try:
        located = locate_submission(path)
    except SubmissionNotFound:
        return files_hash({})
    if located.is_file():
        return files_hash({located.name: located.read_bytes()})
    return files_hash(read_submission(located, link_roots).files)


# -- loader ---------------------------------------------------------------------------------


def resolve_submission_dir(option: str | None, default: Path) -> Path:
    """Pick the submission directory: the --submission option, then $CS336_SUBMISSION, then default."""
    chosen = option or os.environ.get(ENV_VAR) or str(default)
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        raise SubmissionError(
            f"submission directory {chosen!r} does not exist; pass --submission DIR or set "
            f"{ENV_VAR}=DIR to a directory holding adapters.py and cs336_systems/"
        )
    missing = [name for name in (ADAPTERS, f"{PACKAGE}/__init__.py") if not (path / name).is_file()]
    if missing:
        raise SubmissionError(
            f"submission directory {path} has no {' or '.join(missing)}; a submission is a "
            "directory holding adapters.py and the cs336_systems/ package (with its __init__.py)"
        )
    return path


def load_adapters(directory: Path) -> ModuleType:
    """Import ``cs336_systems`` and then ``adapters`` from ``directory``; return ``adapters``.

    Raises SubmissionError, naming the file, when either fails to import, and when a module of
    that name was already imported from somewhere else in this process.
    """
    directory = Path(directory).resolve()
    for name in ("cs336_systems", "adapters"):
        loaded = sys.modules.get(name)
        if loaded is not None:
            where = Path(getattr(loaded, "__file__", "") or "").resolve()
            if directory not in where.parents:
                raise SubmissionError(
                    f"module {name!r} was already imported from {where}, not from the submission "
                    f"{directory}; run each submission in its own pytest process"
                )
    if "adapters" in sys.modules:
        return sys.modules["adapters"]
    try:
        return import_submission(directory)
    except SubmissionError:
        raise
    except BaseException as error:  # SystemExit too: a submission must not end the test run
        raise SubmissionError(
            f"importing the submission in {directory} failed with {type(error).__name__}: {error}. "
            "Fix the import error first: run `.venv/bin/python -c 'import adapters'` at the root of your "
            "checkout (where .venv is)."
        ) from error
