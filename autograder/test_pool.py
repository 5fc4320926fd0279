"""A suite's tests shared out among its process chains as they run, so that the chains end together.

Read by staff who change how a grade spreads its tests over its chains. Every chain of a suite
collects all of the suite's test files (autograder/schedule.py), and before a chain runs a test
it claims it: the first chain to create the test's claim file runs it, and every other chain
skips it and tells the watchdog so ("elsewhere", autograder/watchdog.py). A test process claims
its next test before it runs the current one (pytest tears a test down knowing the next), and a
claim names its chain, so a process that dies leaves its claims to the chain's next process. Each chain starts at a
different point of the suite's collection order, at an even share of the expected seconds
(autograder/test_durations.toml), and goes round; when its own share is done it takes what is
left of the others'. So a wrong estimate costs the grade at most about one test's time, never
a whole file's, and no test runs twice.

The claims are files in the grade's private folder, which no process of the submission can open;
only the harness processes and the grader's watchdog (for tests it fails without running) claim.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from itertools import accumulate
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pool:
    """One chain's part in its suite's pool: the claims folder, the chain's name (its claims say
    it), where in the suite it starts (0 to 1, a share of the expected seconds) and each file's
    expected seconds (kit-relative path)."""

    folder: Path
    owner: str
    start: float = 0.0
    weights: dict[str, float] = field(default_factory=dict)

    def claim(self, nodeid: str) -> bool:
        """True if this chain has ``nodeid`` now: it was free, or this chain claimed it before (a test
        process that died after claiming its next test leaves it to the chain's next process)."""
        path = self.folder / hashlib.sha256(nodeid.encode()).hexdigest()[:40]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                return path.read_text() == self.owner
            except OSError:
                return False
        with os.fdopen(fd, "w") as handle:
            handle.write(self.owner)
        return True

    def as_json(self) -> dict:
        return {"folder": str(self.folder), "owner": self.owner, "start": self.start, "weights": self.weights}

    @classmethod
    def from_json(cls, data: dict) -> Pool:
        return cls(Path(data["folder"]), str(data["owner"]), float(data.get("start", 0.0)),
                   {str(file): float(seconds) for file, seconds in data.get("weights", {}).items()})


def rotated(nodeids: list[str], weights: dict[str, float], start: float) -> list[int]:
    """The positions of ``nodeids`` (in collection order) in the order a chain starting at ``start``
    takes them: from the first test at which that share of the expected seconds is reached, round
    to the beginning. A test's expected seconds are its file's, shared evenly among the file's tests
    (files missing from ``weights`` count as 1 s)."""
    if not nodeids:
        return []
    files = [nodeid.split("::", 1)[0] for nodeid in nodeids]
    tests_of = Counter(files)
    each = [weights.get(file, 1.0) / tests_of[file] for file in files]
    target = (start % 1.0) * sum(each)
    before = accumulate(each, initial=0.0)  # the expected seconds of the tests before each one
    first = next((position for position, done in enumerate(before) if done >= target - 1e-9), 0) % len(nodeids)
    return list(range(first, len(nodeids))) + list(range(first))
