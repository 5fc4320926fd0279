"""How many process chains each suite of a grade gets, so that the chains finish together.

Read by staff who change how fast the grader is. A grade runs its tests in process chains,
``jobs`` at a time. The grader pools both suites (visible, hidden) into one, so that each chain
takes tests of both and the chains end together whichever suite is longer (autograder/grade.py
``_plan``); ``plan_chains`` decides how many chains each pool it is given gets:

- every file's expected seconds come from autograder/test_durations.toml, column ``cpu`` or
  ``gpu`` (measured with autograder/tools/time_test_files.py). A file the table does not know
  is estimated from its size, at the seconds per byte of the known files of the same grade;
  when none is known that is plain size balancing;
- each suite with files gets one chain, and the rest of ``jobs`` go one at a time to the suite
  with the most expected seconds per chain, while every chain of it would still get at least
  ``MIN_CHAIN_WORK_S`` of test work: its files' seconds less a process start (``START_S``) each.
  A grade of a few small files (a student's one problem, most attack and stub grades) runs in
  one chain: a second would double the starts for less than it saves.

Every chain of a suite collects all of its files, and the chains share its tests out as they run
(autograder/test_pool.py): each starts at its own share of the expected seconds and, when that
is done, takes what is left of the others'. So the estimates only choose the counts and the
starting points; a wrong one costs about one test's time, not a file's.

Chains share the GPU; a test whose verdict compares GPU timings gets it to itself while it runs
(marked ``alone_on_gpu``: autograder/gpu_quiet.py), wherever its chain is.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DURATIONS_PATH = Path(__file__).resolve().parent / "test_durations.toml"
COLUMNS = ("cpu", "gpu")
# A chain's start: on the 2-core CPU machine a grade's two chains took 2.5 s from spawn to their
# first test (fork from the zygote, collection, the executor's torch import; a grade of
# mixed_precision_accumulation, 2026-12-07). Its CPU is the cost of a chain that brings no time
# back. The table's cpu numbers each include one (a chain holding that file alone); its gpu numbers
# are closer to the tests alone, so there the work is understated by up to a start a file, which
# changes the count only for a grade of a few seconds of tests.
START_S = 2.5
MIN_CHAIN_WORK_S = 2 * START_S  # a further chain must bring each at least two starts of work


class DurationsError(ValueError):
    """The durations table is unreadable or has a bad entry; the message names it."""


@dataclass(frozen=True)
class FileTiming:
    """One row of the durations table: expected seconds per column."""

    cpu: float | None = None
    gpu: float | None = None


@dataclass
class Chain:
    """One process chain: it collects all of its suite's ``files`` and runs its share of their tests.

    ``index`` numbers the suite's ``count`` chains from 0; chain k starts at k / count of the
    suite's expected seconds (``weights``: each file's, in seconds) and ``expected_s`` is an even
    share of them.
    """

    suite: str
    index: int
    files: list[Path] = field(default_factory=list)
    expected_s: float = 0.0
    count: int = 1
    weights: dict[Path, float] = field(default_factory=dict)

    @property
    def start(self) -> float:
        return self.index / self.count


def load_durations(path: Path = DURATIONS_PATH) -> dict[str, FileTiming]:
    """The table as {file path relative to the kit: FileTiming}; raise DurationsError naming a bad entry."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DurationsError(f"cannot read the test durations table {path}: {error}") from error
    table = {}
    for name, entry in data.get("files", {}).items():
        if not isinstance(entry, dict) or set(entry) - set(COLUMNS):
            raise DurationsError(f"{path}: [files] {name!r} must be a table with keys among {list(COLUMNS)}; "
                                 f"got {entry!r}" + _retired_key_hint(entry))
        for column in COLUMNS:
            value = entry.get(column)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise DurationsError(f"{path}: [files] {name!r} {column} must be seconds (a number >= 0); "
                                     f"got {value!r}")
        table[name] = FileTiming(entry.get("cpu"), entry.get("gpu"))
    return table


def _retired_key_hint(entry) -> str:
    """What replaced a key that older tables had, if ``entry`` has one."""
    if not isinstance(entry, dict):
        return ""
    if "alone_on_gpu" in entry:
        return " (alone_on_gpu is now a test marker: mark the tests that compare GPU timings @pytest.mark.alone_on_gpu)"
    if "shards" in entry:
        return " (shards is gone: every chain of a suite now shares out all of its tests, autograder/test_pool.py)"
    return ""


def expected_seconds(paths: list[Path], kit: Path, durations: dict[str, FileTiming], column: str) -> dict[Path, float]:
    """Each file's expected seconds: the table's ``column``, else its size in bytes times the
    seconds per byte of the known files among ``paths`` (1 when none is known)."""
    known = {}
    for path in paths:
        timing = durations.get(path.relative_to(kit).as_posix())
        value = getattr(timing, column) if timing is not None else None
        if value is not None:
            known[path] = float(value)
    known_bytes = sum(path.stat().st_size for path in known)
    per_byte = sum(known.values()) / known_bytes if known and known_bytes else 1.0
    return {path: known[path] if path in known else path.stat().st_size * per_byte for path in paths}


def plan_chains(files: dict[str, list[Path]], jobs: int, kit: Path, *, gpu: bool,
                durations: dict[str, FileTiming] | None = None, min_work_s: float = MIN_CHAIN_WORK_S) -> list[Chain]:
    """The chains for ``files`` ({suite: test files}), ``jobs`` of them at a time, in the order to
    start them: the suite with the most expected seconds per chain first.

    Every suite with files gets at least one chain, whatever ``jobs`` is; a suite gets a further
    one only while each of its chains keeps ``min_work_s`` of work (its seconds less a start per file).
    """
    durations = load_durations() if durations is None else durations
    column = "gpu" if gpu else "cpu"
    weights = {suite: expected_seconds(sorted(paths), kit, durations, column) for suite, paths in files.items() if paths}
    totals = {suite: sum(estimate.values()) for suite, estimate in weights.items()}
    work = {suite: sum(max(0.0, seconds - START_S) for seconds in estimate.values()) for suite, estimate in weights.items()}
    counts = {suite: 1 for suite in weights}
    while sum(counts.values()) < jobs:
        worth = [suite for suite in counts if work[suite] / (counts[suite] + 1) >= min_work_s]
        if not worth:
            break
        counts[max(worth, key=lambda suite: (totals[suite] / counts[suite], suite))] += 1
    chains = [Chain(suite, index, sorted(weights[suite]), totals[suite] / count, count, weights[suite])
              for suite, count in counts.items() for index in range(count)]
    chains.sort(key=lambda chain: (-chain.expected_s, chain.suite, chain.index))
    return chains
