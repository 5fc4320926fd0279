"""The points manifest (autograder/manifest.toml): problems, their points, and which tests grade them;
also the writeup's written problems, which the staff grade and the grader never reads.

Read by the grader and by the selftests that check the handout's points table. A test belongs
to a problem by its file name, ``test_<problem>*.py``; when several problem names match (say
``flash_forward`` and ``flash_forward_triton``), the longest one wins.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_PATH = Path(__file__).resolve().parent / "manifest.toml"
EDITION_FILE = "edition"
"""Next to the manifest: the edition a bundle was built for (one line, "2025" or "2026")."""
EDITION_MARK = re.compile(r"^\s*(?:<!--|#) edition (\d{4})\b")
EDITION_END = re.compile(r"^\s*(?:<!--|#) end edition\b")


class ManifestError(ValueError):
    """The manifest is malformed, or a test file maps to no problem."""


@dataclass(frozen=True)
class Problem:
    """One graded problem of the handout."""

    name: str
    section: str
    points: float
    files: tuple[str, ...]
    weights: tuple[tuple[str, float], ...] = ()
    gpu_time_s: float | None = None  # on a GPU runner, this problem's share of a partial grade's time limit

    def weight_of(self, test_key: str) -> float:
        """Weight of the test ``"<file name>::<test name>"``: the first matching pattern, else 1."""
        for pattern, weight in self.weights:
            if fnmatch.fnmatchcase(test_key, pattern):
                return weight
        return 1.0


@dataclass(frozen=True)
class WrittenProblem:
    """One problem of the writeup: graded by the course staff from writeup.pdf, never by the grader."""

    name: str
    section: str  # "W1", "W2", ...: the handout's heading and its writeup table
    points: float


@dataclass(frozen=True)
class GradingSettings:
    """Limits and display choices from the manifest's [grading] table."""

    test_timeout_s: float = 120.0
    total_timeout_s: float = 1500.0
    runner_timeout_s: int = 600  # read by autograder/gradescope/run_autograder (see the manifest)
    runner_margin_s: int = 60
    crash_streak_limit: int = 3
    restart_limit: int = 25
    hidden_visibility: str = "after_published"
    hidden_output_chars: int = 600
    ungraded: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """Problems in handout order, plus the grading settings."""

    problems: tuple[Problem, ...]
    settings: GradingSettings = field(default_factory=GradingSettings)
    writeup: tuple[WrittenProblem, ...] = ()  # staff-graded, apart from total_points
    edition: str = ""                 # the edition these problems are ("" for a manifest without editions)
    stated_total: float | None = None  # the edition's total (autograded + writeup) as the manifest states it
    other_editions: tuple[str, ...] = ()  # names of problems of other editions: their test files are skipped

    @property
    def writeup_points(self) -> float:
        return sum(problem.points for problem in self.writeup)

    @property
    def by_name(self) -> dict[str, Problem]:
        return {problem.name: problem for problem in self.problems}

    @property
    def total_points(self) -> float:
        return sum(problem.points for problem in self.problems)

    def time_limit_s(self, problems: list[str], on_gpu: bool) -> float:
        """The seconds a grade of ``problems`` (names) may take in all: ``total_timeout_s``,
        except a grade on a GPU runner of only problems that each have a ``gpu_time_s``, which
        gets their sum (at most ``total_timeout_s``). So a FlashAttention grade is bounded by
        what its problems state, whatever the submission does."""
        total = self.settings.total_timeout_s
        if not on_gpu or not problems:
            return total
        chosen = [self.by_name[name] for name in problems if name in self.by_name]
        if not chosen or any(problem.gpu_time_s is None for problem in chosen):
            return total
        return min(total, sum(problem.gpu_time_s for problem in chosen))

    def _owner(self, file_name: str) -> str | None:
        """The longest problem name, of any edition, that the test file ``file_name`` is named after."""
        stem = Path(file_name).name
        if not (stem.startswith("test_") and stem.endswith(".py")):
            return None
        rest = stem[len("test_") : -len(".py")]
        names = [p.name for p in self.problems] + list(self.other_editions)
        matching = [name for name in names if rest == name or rest.startswith(name + "_")]
        return max(matching, key=len) if matching else None

    def problem_of_file(self, file_name: str) -> Problem | None:
        """The problem graded by the test file ``file_name`` (a base name), or None (also for another edition's)."""
        return self.by_name.get(self._owner(file_name) or "")

    def in_other_edition(self, file_name: str) -> bool:
        """Whether the test file ``file_name`` belongs to a problem of another edition (never graded in this one)."""
        return self._owner(file_name) in self.other_editions


_VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}


def editions(path: Path = MANIFEST_PATH) -> dict:
    """``{"default": name, "names": [...]}`` of the manifest at ``path`` (no [editions] table: no names)."""
    table = tomllib.loads(Path(path).read_text()).get("editions", {})
    return {"default": table.get("default", ""), "names": sorted(k for k, v in table.items() if isinstance(v, dict))}


def chosen_edition(path: Path = MANIFEST_PATH) -> str:
    """The edition to use when none is asked for: $CS336_EDITION, else the edition file next to the manifest, else
    the manifest's default."""
    if os.environ.get("CS336_EDITION"):
        return os.environ["CS336_EDITION"].strip()
    written = Path(path).with_name(EDITION_FILE)
    if written.is_file():
        return written.read_text().strip()
    return editions(path)["default"]


def render_edition(text: str, edition: str) -> str:
    """``text`` (Markdown or Python) for ``edition``: the blocks between ``<!-- edition YYYY -->`` (or
    ``# edition YYYY``) and ``<!-- end edition -->`` (``# end edition``) lines are kept for that edition
    and dropped for others; the marker lines go."""
    kept, block = [], None
    for line in text.splitlines(keepends=True):
        start, end = EDITION_MARK.match(line), EDITION_END.match(line)
        if start:
            if block is not None:
                raise ManifestError(f"an edition block opens inside another: {line.strip()}")
            block = start.group(1)
        elif end:
            if block is None:
                raise ManifestError(f"an edition block ends that never opened: {line.strip()}")
            block = None
        elif block is None or block == edition:
            kept.append(line)
    if block is not None:
        raise ManifestError(f"the edition {block} block never ends (add a line '<!-- end edition -->' or '# end edition')")
    return "".join(kept)


def _in_edition(entry: dict, edition: str, where: str, names: list[str]) -> bool:
    listed = entry.get("editions")
    if listed is None:
        return True
    unknown = sorted(set(listed) - set(names))
    if unknown:
        raise ManifestError(f"{where}: editions {unknown} are not in [editions] ({names})")
    return edition in listed


def load_manifest(path: Path = MANIFEST_PATH, edition: str | None = None) -> Manifest:
    """Parse ``path`` for ``edition`` (default: :func:`chosen_edition`); raise ManifestError naming the key when
    something is missing or wrong, or when the edition is not one of the manifest's."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ManifestError(f"cannot read the points manifest {path}: {error}") from error
    names = sorted(k for k, v in data.get("editions", {}).items() if isinstance(v, dict))
    if names:
        edition = edition or chosen_edition(path)
        if edition not in names:
            raise ManifestError(f"{path}: no edition {edition!r}; the editions are {names} (--edition or $CS336_EDITION)")
    else:
        edition = ""
    grading = data.get("grading", {})
    known = GradingSettings.__dataclass_fields__
    unknown = sorted(set(grading) - set(known))
    if unknown:
        raise ManifestError(f"{path}: unknown [grading] keys {unknown}; known: {sorted(known)}")
    settings = GradingSettings(**{**grading, "ungraded": tuple(grading.get("ungraded", ()))})
    if settings.hidden_visibility not in _VISIBILITIES:
        raise ManifestError(
            f"{path}: [grading] hidden_visibility must be one of {sorted(_VISIBILITIES)}; "
            f"got {settings.hidden_visibility!r}"
        )
    problems, other = [], []
    for name, entry in data.get("problems", {}).items():
        if names and not _in_edition(entry, edition, f"[problems.{name}]", names):
            other.append(name)
            continue
        for key in ("section", "points"):
            if key not in entry:
                raise ManifestError(f"{path}: [problems.{name}] has no {key!r}")
        weights = tuple((str(k), float(v)) for k, v in entry.get("weights", {}).items())
        problems.append(
            Problem(
                name=name,
                section=str(entry["section"]),
                points=float(entry["points"]),
                files=tuple(entry.get("files", ())),
                weights=weights,
                gpu_time_s=float(entry["gpu_time_s"]) if "gpu_time_s" in entry else None,
            )
        )
    if not problems:
        raise ManifestError(f"{path}: no [problems.*] tables")
    writeup = []
    for name, entry in data.get("writeup", {}).items():
        if names and not _in_edition(entry, edition, f"[writeup.{name}]", names):
            continue
        for key in ("section", "points"):
            if key not in entry:
                raise ManifestError(f"{path}: [writeup.{name}] has no {key!r}")
        writeup.append(WrittenProblem(name=name, section=str(entry["section"]), points=float(entry["points"])))
    stated = data["editions"][edition].get("total") if names else None
    return Manifest(problems=tuple(problems), settings=settings, writeup=tuple(writeup), edition=edition,
                    stated_total=float(stated) if stated is not None else None, other_editions=tuple(other))
