"""The leaderboard's acceptance run: the reference, the honest slow fixture and every cheat.

Staff run this on the leaderboard GPU after changing the leaderboard or the reference:

    python -m leaderboard selftest            # on the GPU: about 6 minutes
    python -m leaderboard selftest --cpu  # on a CPU: the checks a CPU can judge

It passes when the reference is accepted (timed three times in one run, with a spread of at
most ``MAX_REFERENCE_SPREAD_PCT`` between the three medians), the honest slow fixture is
accepted, and every cheat fixture is refused with the reasons its ``[verdict]`` lists (fixtures/leaderboard).
Records, ``summary.md`` (written by the batches' one summary writer, autograder/batch/driver.py:
counts, wall time, the slowest entries, those not as expected, then a table of every entry) and
the table go to ``records/leaderboard/selftest/``, which git ignores (or ``--out``); a run worth
keeping is copied into a dated folder of records/.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autograder.batch.driver import Tally, summary_lines, write_summary
from leaderboard.batch import code_version
from fixtures import Fixture, materialize
from fixtures.leaderboard import FIXTURES
from leaderboard.parent import describe, run_submission
from leaderboard.worker_setup import is_root
from leaderboard.store import ROOT, STORE_DIR, read_records
from leaderboard.table import write_table

DEFAULT_OUT = STORE_DIR / "selftest"
MAX_REFERENCE_SPREAD_PCT = 3.0
REFERENCE_REPEATS = 3


@dataclass(frozen=True)
class Entry:
    """One run of the self-test and what it must give (empty ``expected``: accepted)."""

    name: str
    source: Path | Fixture  # the reference's folder, or a fixture, materialized for its run
    mode: str
    repeats: int
    expected: tuple[str, ...]


def plan(cpu: bool, only: list[str] | None = None, isolated: bool = True) -> list[Entry]:
    """The runs, reference first (so the GPU is warm and its clocks settled for the rest).
    Without isolation the attack fixtures are left out: they would succeed."""
    entries = [Entry("reference", ROOT / "reference", "cpu" if cpu else "official", 1 if cpu else REFERENCE_REPEATS, ())]
    for f in FIXTURES:
        if f.verdict.attack and not isolated:
            continue
        if cpu:
            if f.verdict.cpu_refusals is None:
                continue
            entries.append(Entry(f.name, f, "cpu", 1, f.verdict.cpu_refusals))
        else:
            entries.append(Entry(f.name, f, "quick" if f.verdict.quick else "official", 1, f.verdict.gpu_refusals))
    if only:
        unknown = set(only) - {e.name for e in entries}
        if unknown:
            raise SystemExit(f"unknown self-test entries {sorted(unknown)}; known: {[e.name for e in entries]}")
        entries = [e for e in entries if e.name in only]
    return entries


def judge(entry: Entry, record: dict) -> tuple[bool, str]:
    """Whether the record is what ``entry`` expects, and a short note saying what differs."""
    codes = [r["code"] for r in record.get("refusals", [])]
    if not entry.expected:
        if not record["accepted"]:
            return False, f"expected accepted, refused: {', '.join(codes)}"
        spread = record.get("repeat_spread_pct")
        if entry.repeats > 1 and spread is not None and spread > MAX_REFERENCE_SPREAD_PCT:
            return False, f"spread of {entry.repeats} timings {spread:.2f}% > {MAX_REFERENCE_SPREAD_PCT}%"
        return True, "accepted" + (f", spread {spread:.2f}%" if spread is not None else "")
    missing = [code for code in entry.expected if code not in codes]
    if missing:
        got = ", ".join(codes) if codes else "accepted"
        return False, f"expected refusal {', '.join(missing)}; got {got}"
    return True, "refused: " + ", ".join(codes)


def output_dir(out_dir: Path, only: list[str] | None) -> Path:
    """Where a run writes: a partial run (``--only``) aimed at the default folder goes to a
    subfolder of its own, so that it never replaces the records of the last full run."""
    out_dir = Path(out_dir)
    if only and out_dir == DEFAULT_OUT:
        return out_dir / ("only-" + "-".join(sorted(only)))
    return out_dir


def run_selftest(out_dir: Path = DEFAULT_OUT, cpu: bool = False, only: list[str] | None = None, same_user: bool = False) -> int:
    """Run the plan, print and write a summary; return 0 when every entry is as expected.
    Raises ``worker_setup.SandboxUnavailable`` when the submissions cannot be isolated."""
    out_dir = output_dir(out_dir, only)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / "records.jsonl"
    store.unlink(missing_ok=True)  # the table and summary describe this run only
    started = time.monotonic()
    rows = []
    entries = plan(cpu, only, isolated=not same_user or is_root())
    with tempfile.TemporaryDirectory(prefix="leaderboard-selftest-") as scratch:  # the fixtures, materialized
        for number, entry in enumerate(entries, start=1):
            print(f"\n=== [{number}/{len(entries)}] {entry.name}: {entry.mode}, expected "
                  f"{'accepted' if not entry.expected else 'refused: ' + ', '.join(entry.expected)} ===", flush=True)
            began = time.monotonic()
            path = materialize(entry.source, Path(scratch) / entry.name) if isinstance(entry.source, Fixture) else entry.source
            record = run_submission(path, entry.name, entry.mode, entry.repeats, store=store, same_user=same_user)
            print(describe(record), flush=True)
            ok, note = judge(entry, record)
            rows.append((entry, record, ok, note, time.monotonic() - began))

    env = rows[0][1].get("environment", {}) if rows else {}
    tally = Tally(total=len(rows), done=sum(ok for _, _, ok, _, _ in rows),
                  failed=[(entry.name, note) for entry, _, ok, note, _ in rows if not ok],
                  seconds=time.monotonic() - started, where=env.get("gpu", "?"),
                  slowest=sorted(((entry.name, s) for entry, *_, s in rows), key=lambda item: -item[1])[:5],
                  version=f"code {code_version()}")
    head = [f"`python -m leaderboard selftest{' --cpu' if cpu else ''}` on {env.get('gpu', '?')} "
            f"(torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, Python {env.get('python', '?')}), "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}."]
    table = ["| submission | mode | expected | verdict | time (ms) | as expected |",
             "|---|---|---|---|---:|---|"]
    for entry, record, ok, note, _ in rows:
        expected = "accepted" if not entry.expected else "refused: " + ", ".join(entry.expected)
        time_ms = record.get("time_ms")
        table.append(
            f"| {entry.name} | {entry.mode} | {expected} | {note} | {'–' if time_ms is None else f'{time_ms:.3f}'} | {'yes' if ok else '**NO**'} |"
        )
    summary = write_summary(out_dir, summary_lines("Leaderboard self-test", tally, "as expected", unit="entries",
                                                   head=head, body=table))
    markdown, png = write_table(read_records(store), out_dir, include_unofficial=True)
    print("\n" + summary)
    print(f"records: {store}\ntable: {markdown}" + (f", {png}" if png else ""))
    return 0 if all(ok for _, _, ok, _, _ in rows) else 1
