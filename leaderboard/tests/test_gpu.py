"""On the leaderboard GPU: the reference and every fixture get their verdicts through the real
parent (``--quick`` timings), and the sandboxed timing matches a plain in-process one.
``python -m leaderboard selftest`` is the full acceptance run. Run as root, so that the
attack fixtures run against an isolated worker (without root they are skipped and the others
run ``--same-user``)."""

import json
import subprocess
import sys

import pytest

from fixtures import materialize
from fixtures.leaderboard import FIXTURES
from leaderboard.parent import describe, run_submission
from leaderboard.worker_setup import is_root
from leaderboard.selftest import MAX_REFERENCE_SPREAD_PCT
from leaderboard.store import ROOT

pytestmark = pytest.mark.gpu

# The official timing as the worker ran it before the sandbox: the submission imported into the
# timing process itself, no pipe, no messages, no uid.
IN_PROCESS_TIMING = """
import json, sys, torch
from pathlib import Path
from harness.submission import load_adapters
from leaderboard.config import LEADERBOARD, QUICK
from leaderboard.timing import time_official
from leaderboard.timer_guard import capture_clock
Fn = load_adapters(Path(sys.argv[1])).get_flashattention_autograd_function_triton()
flash = torch.compile(Fn.apply)
timings = time_official(flash, LEADERBOARD, QUICK, capture_clock(True), repeats=3)
print(json.dumps([t.median_ms for t in timings]))
"""


def test_reference_is_accepted_with_a_steady_time(tmp_path):
    record = run_submission(ROOT / "reference", "reference", "quick", repeats=3, store=tmp_path / "records.jsonl", same_user=not is_root())
    assert record["accepted"], describe(record)
    assert record["repeat_spread_pct"] <= MAX_REFERENCE_SPREAD_PCT, describe(record)
    assert record["time_ms"] > record["floor_ms"]
    brackets = record["brackets"]
    assert all(b["sum_ms"] <= b["bracket_ms"] for b in brackets.values()), brackets


def test_the_sandbox_does_not_change_the_official_time():
    record = run_submission(ROOT / "reference", "reference", "quick", repeats=3, same_user=not is_root())
    done = subprocess.run([sys.executable, "-c", IN_PROCESS_TIMING, str(ROOT / "reference")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    plain = sorted(json.loads(done.stdout.splitlines()[-1]))[1]
    assert abs(record["time_ms"] - plain) <= 0.02 * plain, (record["repeat_ms"], plain)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.name)
def test_fixture_verdict(fixture, tmp_path):
    if fixture.verdict.attack and not is_root():
        pytest.skip("the attack fixtures run only against an isolated worker (run as root)")
    record = run_submission(materialize(fixture, tmp_path / fixture.name), fixture.name, "quick", store=tmp_path / "records.jsonl", same_user=not is_root())
    codes = [r["code"] for r in record["refusals"]]
    if not fixture.verdict.gpu_refusals:
        assert record["accepted"], describe(record)
    else:
        assert set(fixture.verdict.gpu_refusals) <= set(codes), describe(record)
