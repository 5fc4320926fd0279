"""On the leaderboard GPU: the reference and every fixture get their verdicts through the real
runner (``--quick`` timings). ``python -m leaderboard selftest`` is the full acceptance run."""

import pytest

from leaderboard.fixtures import FIXTURES
from leaderboard.runner import describe, run_submission
from leaderboard.selftest import MAX_REFERENCE_SPREAD_PCT
from leaderboard.store import ROOT

pytestmark = pytest.mark.gpu


def test_reference_is_accepted_with_a_steady_time(tmp_path):
    record = run_submission(ROOT / "reference", "reference", "quick", repeats=3, store=tmp_path / "records.jsonl")
    assert record["accepted"], describe(record)
    assert record["repeat_spread_pct"] <= MAX_REFERENCE_SPREAD_PCT, describe(record)
    assert record["time_ms"] > record["floor_ms"]


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.name)
def test_fixture_verdict(fixture, tmp_path):
    record = run_submission(fixture.path, fixture.name, "quick", store=tmp_path / "records.jsonl")
    codes = [r["code"] for r in record["refusals"]]
    if not fixture.gpu_refusals:
        assert record["accepted"], describe(record)
    else:
        assert set(fixture.gpu_refusals) <= set(codes), describe(record)
