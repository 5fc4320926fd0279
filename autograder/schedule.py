"""Which test files run in which process chain, so that a grade's chains finish together.

Read by staff who change how fast the grader is. A grade runs each suite (visible, hidden) in
process chains: one pytest process runs a chain's files in order, and a chain never mixes
suites. ``plan_chains`` decides how many chains each suite gets and which files go in each:

- every file's expected seconds come from autograder/test_durations.toml, column ``cpu`` or
  ``gpu`` (measured with autograder/tools/time_test_files.py). A file the table does not know
  is estimated from its size, at the seconds per byte of the known files of the same grade;
  when none is known that is plain size balancing;
- within a suite, files are placed longest first, each into the chain expected to finish first
  (longest-processing-time-first: the longest chain is within 4/3 of the best possible, and
  no chain can be shorter than the longest file);
- chains are added to the suite whose longest chain is the longest, the fewest that shorten it,
  as long as ``jobs`` allows; chains that would not shorten the grade are not started (each costs
  a process, and on a GPU its memory);
- a file whose row says ``shards = N`` (a file longer than a grade should take, on the runners
  with many cores) is split into N parts of equal expected time; part k holds the tests at
  positions k, k + N, k + 2N, ... of the file's collection order (the test process selects them:
  ``Chain.shards``, autograder/pytest_plugin.py), so the parts need no test ids before
  collection. Parts of one file that land in one chain run together; a chain that holds every
  part runs the whole file.

Chains share the GPU; a test whose verdict compares GPU timings gets it to itself while it runs
(marked ``alone_on_gpu``: autograder/gpu_quiet.py), wherever its chain is.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DURATIONS_PATH = Path(__file__).resolve().parent / "test_durations.toml"
COLUMNS = ("cpu", "gpu")


class DurationsError(ValueError):
    """The durations table is unreadable or has a bad entry; the message names it."""


@dataclass(frozen=True)
class FileTiming:
    """One row of the durations table: expected chain seconds per column, and the part count."""

    cpu: float | None = None
    gpu: float | None = None
    shards: int = 1


@dataclass
class Chain:
    """One process chain: a suite's files, run in the given order by one pytest process.

    ``index`` numbers the suite's chains from 0; ``expected_s`` is the sum of the files'
    estimates. ``shards`` holds the files
    of which this chain runs only some parts: {file: (the parts it runs, the file's part count)}.
    """

    suite: str
    index: int
    files: list[Path] = field(default_factory=list)
    expected_s: float = 0.0
    shards: dict[Path, tuple[tuple[int, ...], int]] = field(default_factory=dict)


def load_durations(path: Path = DURATIONS_PATH) -> dict[str, FileTiming]:
    """The table as {file path relative to the kit: FileTiming}; raise DurationsError naming a bad entry."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DurationsError(f"cannot read the test durations table {path}: {error}") from error
    table = {}
    for name, entry in data.get("files", {}).items():
        if not isinstance(entry, dict) or set(entry) - {*COLUMNS, "shards"}:
            raise DurationsError(f"{path}: [files] {name!r} must be a table with keys among "
                                 f"{[*COLUMNS, 'shards']}; got {entry!r}"
                                 + (" (alone_on_gpu is now a test marker: mark the tests that compare GPU "
                                    "timings @pytest.mark.alone_on_gpu)" if isinstance(entry, dict)
                                    and "alone_on_gpu" in entry else ""))
        for column in COLUMNS:
            value = entry.get(column)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise DurationsError(f"{path}: [files] {name!r} {column} must be seconds (a number >= 0); "
                                     f"got {value!r}")
        shards = entry.get("shards", 1)
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 16:
            raise DurationsError(f"{path}: [files] {name!r} shards must be a whole number from 1 to 16; got {shards!r}")
        table[name] = FileTiming(entry.get("cpu"), entry.get("gpu"), shards)
    return table


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


def _order(key) -> tuple:
    """A repeatable order for a file (a Path) or a part of one (Path, part index)."""
    return (key[0].as_posix(), key[1]) if isinstance(key, tuple) else (key.as_posix(), 0)


def pack_longest_first(costs: dict, chains: int) -> list[list]:
    """Split ``costs``' files (or parts of files) into at most ``chains`` groups, longest first into
    the group with the least so far (ties: the lower group, then the path, so plans are repeatable)."""
    groups: list[list] = [[] for _ in range(max(1, min(chains, len(costs))))]
    loads = [0.0] * len(groups)
    for path in sorted(costs, key=lambda p: (-costs[p], _order(p))):
        target = loads.index(min(loads))
        groups[target].append(path)
        loads[target] += costs[path]
    return [group for group in groups if group]


def _longest(costs: dict, chains: int) -> float:
    return max(sum(costs[p] for p in group) for group in pack_longest_first(costs, chains))


def plan_chains(files: dict[str, list[Path]], jobs: int, kit: Path, *, gpu: bool,
                durations: dict[str, FileTiming] | None = None) -> list[Chain]:
    """The chains for ``files`` ({suite: test files}), ``jobs`` of them at a time, in the order
    to start them: the longest first.

    Every suite with files gets at least one chain, whatever ``jobs`` is.
    """
    durations = load_durations() if durations is None else durations
    column = "gpu" if gpu else "cpu"
    costs: dict[str, dict[tuple[Path, int], float]] = {}  # per suite, the parts of files that share the GPU
    parts: dict[Path, int] = {}  # each file's part count
    for suite, paths in files.items():
        if not paths:
            continue
        estimate = expected_seconds(paths, kit, durations, column)
        for path in paths:
            timing = durations.get(path.relative_to(kit).as_posix(), FileTiming())
            parts[path] = timing.shards
            for part in range(timing.shards):
                costs.setdefault(suite, {})[(path, part)] = estimate[path] / timing.shards
    counts = {suite: 1 for suite in costs}
    while sum(counts.values()) < jobs and counts:
        worst = max(counts, key=lambda suite: _longest(costs[suite], counts[suite]))
        now = _longest(costs[worst], counts[worst])
        # The fewest chains more that shorten it (equal parts may need two more before one helps).
        room = min(jobs - sum(counts.values()), len(costs[worst]) - counts[worst])
        extra = next((n for n in range(1, room + 1) if _longest(costs[worst], counts[worst] + n) < now - 1e-9), None)
        if extra is None:
            break
        counts[worst] += extra
    chains = []
    for suite, count in counts.items():
        for index, group in enumerate(pack_longest_first(costs[suite], count)):
            held: dict[Path, list[int]] = {}
            for path, part in sorted(group, key=_order):
                held.setdefault(path, []).append(part)
            shards = {path: (tuple(mine), parts[path]) for path, mine in held.items() if len(mine) < parts[path]}
            chains.append(Chain(suite, index, sorted(held), sum(costs[suite][p] for p in group), shards=shards))
    chains.sort(key=lambda chain: -chain.expected_s)
    return chains
