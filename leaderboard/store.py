"""The results store: one JSON object per line, one line per run, appended and never rewritten.

Staff read this file to know where results live and what a record holds. A record is what the
worker reported (checks, refusals, times, environment) plus what the trusted parent adds: the
entry's name, the submission's hash and path, the UTC date and the run's wall time. Refused runs
are stored too, so the history shows every attempt; the table ranks accepted ones only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE_DIR = ROOT / "records" / "leaderboard"
"""The live leaderboard's folder, outside the code package and ignored by git: the store, its
table, the batch's runs, the self-test's output (records/README.md)."""
DEFAULT_STORE = STORE_DIR / "records.jsonl"
OLD_STORE_DIR = ROOT / "leaderboard" / "results"
"""Where the stores were kept inside the code package, before they moved to STORE_DIR."""

# Fields every record has (others may be missing, e.g. times of a refused run).
REQUIRED_FIELDS = ("name", "accepted", "refusals", "checks", "mode", "date", "submission_hash")


def moved_store_message(store: Path) -> str | None:
    """Why ``store``, a file of STORE_DIR, must not be used yet: a file of the same name still lies
    in OLD_STORE_DIR (a kit updated in place), whose records a new store would silently leave
    out. The message says how to move them. None when there is nothing to move."""
    store = Path(store)
    old = OLD_STORE_DIR / store.name
    if store.parent != STORE_DIR or not old.exists():
        return None
    return (f"the leaderboard's store has moved out of the code package, from {old} to {store}, and {old} "
            f"still holds records. Move them first: mkdir -p {STORE_DIR} && cat {old} >> {store} && rm {old} "
            f"(or pass --store {old} to use the old file as it is)")


def append_record(record: dict, store: Path = DEFAULT_STORE) -> None:
    """Append one record as a single JSON line, creating the store (and its folder) if needed."""
    missing = [field for field in REQUIRED_FIELDS if field not in record]
    if missing:
        raise ValueError(f"a leaderboard record needs the fields {missing}; got {sorted(record)}")
    store = Path(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    with store.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, default=str) + "\n")


def read_records(store: Path = DEFAULT_STORE) -> list[dict]:
    """Every record in the store, oldest first; an absent store has none.

    A line that is not a JSON object (a run interrupted mid-write, a bad hand edit) is skipped
    with a warning naming its line number, so one bad line never hides the others.
    """
    store = Path(store)
    if not store.exists():
        return []
    records = []
    for number, line in enumerate(store.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            print(f"warning: {store}:{number} is not valid JSON ({error}); skipped", file=sys.stderr)
            continue
        if not isinstance(record, dict):
            print(f"warning: {store}:{number} is not a JSON object; skipped", file=sys.stderr)
            continue
        records.append(record)
    return records
