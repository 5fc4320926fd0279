"""Where a grade's time went: one line per process chain, read from ``grade --timeline FILE``.

Staff tool. A grade runs its tests in process chains side by side (autograder/chains.py); its
"chain times" line says how long each chain took, and this says why: for each chain, when its
first test started (its test process's start-up and collection), how long its tests ran, how
long they waited for the GPU lock (autograder/gpu_quiet.py), how long it stood between tests
(a restarted executor, fixtures), and when it ended, all in seconds from the grade's start:

    python3 -m autograder grade reference --require-gpu --timeline grade.jsonl
    python3 -m autograder.tools.grade_timeline grade.jsonl

The file names hidden tests: it is for staff, like the grade's log.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.grade_timeline")

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ChainTimes:
    """One chain's seconds (from the grade's start for ``first_start`` and ``ended``)."""

    chain: str
    first_start: float | None = None  # None: no test started
    tests: int = 0
    testing: float = 0.0
    cpu: float = 0.0
    waiting: float = 0.0
    between: float = 0.0
    ended: float = 0.0


def chain_times(events: list[dict]) -> tuple[float, list[ChainTimes]]:
    """The grade's wall seconds (its first to its last event) and each chain's times."""
    if not events:
        return 0.0, []
    origin = min(event["t"] for event in events)
    by_chain: dict[str, list[dict]] = defaultdict(list)
    for event in sorted(events, key=lambda event: event["t"]):
        if event.get("chain"):
            by_chain[event["chain"]].append(event)
    rows = []
    for chain, chain_events in sorted(by_chain.items()):
        row = ChainTimes(chain)
        started: float | None = None
        asked: float | None = None
        free: float | None = None  # when the chain's last test ended
        for event in chain_events:
            kind, when = event["event"], event["t"] - origin
            if kind == "wait":
                asked = when
            elif kind == "start":
                if row.first_start is None:
                    row.first_start = when
                ready = asked if asked is not None else when  # the chain's wait for the lock is not "between"
                row.waiting += when - ready
                if free is not None:
                    row.between += ready - free
                asked, started = None, when
            elif kind == "end" and started is not None:
                row.tests += 1
                row.testing += when - started
                row.cpu += event.get("cpu") or 0.0
                started, free = None, when
            row.ended = when
        rows.append(row)
    return max(event["t"] for event in events) - origin, rows


def format_rows(total: float, rows: list[ChainTimes]) -> str:
    """A table of ``chain_times``."""
    lines = [f"grade: {total:.1f} s from its start to its last event",
             f"{'chain':<12} {'first test':>10} {'tests':>6} {'testing':>8} {'CPU':>7} {'GPU wait':>9} "
             f"{'between':>8} {'ended':>7}"]
    for row in rows:
        first = "-" if row.first_start is None else f"{row.first_start:.1f}"
        lines.append(f"{row.chain:<12} {first:>10} {row.tests:>6} {row.testing:>8.1f} {row.cpu:>7.1f} "
                     f"{row.waiting:>9.1f} {row.between:>8.1f} {row.ended:>7.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline", type=Path, help="the file given to grade --timeline")
    args = parser.parse_args(argv)
    try:
        events = [json.loads(line) for line in args.timeline.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"grade_timeline: cannot read {args.timeline}: {error}; give the file that "
                         "`python3 -m autograder grade ... --timeline FILE` wrote")
    print(format_rows(*chain_times(events)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
