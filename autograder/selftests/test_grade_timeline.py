"""``grade --timeline`` and autograder/tools/grade_timeline.py: where a grade's time went, per chain."""

from __future__ import annotations

import json

import pytest

from autograder.tools import grade_timeline


def _event(t, event, chain="", nodeid="", **extra):
    return {"t": 1000.0 + t, "event": event, "chain": chain, "nodeid": nodeid, **extra}


def test_each_chain_gets_its_start_up_tests_waits_gaps_and_end():
    events = [
        _event(0.0, "grade"),
        _event(1.0, "spawn", "visible#0"),
        _event(5.0, "start", "visible#0", "a"), _event(7.0, "end", "visible#0", "a", cpu=1.5),
        _event(7.5, "wait", "visible#0", "b"), _event(10.5, "start", "visible#0", "b"),
        _event(12.5, "end", "visible#0", "b", cpu=2.0, killed=True),  # stopped: its process restarts
        _event(12.6, "spawn", "visible#0"),
        _event(16.5, "start", "visible#0", "c"), _event(17.5, "end", "visible#0", "c", cpu=1.0),
        _event(2.0, "spawn", "hidden#0"),
        _event(6.0, "start", "hidden#0", "h"), _event(9.0, "end", "hidden#0", "h", cpu=3.0),
        _event(20.0, "graded"),
    ]
    total, rows = grade_timeline.chain_times(events)
    assert total == pytest.approx(20.0)
    by_chain = {row.chain: row for row in rows}
    visible = by_chain["visible#0"]
    assert (visible.first_start, visible.tests, visible.ended) == pytest.approx((5.0, 3, 17.5))
    assert visible.testing == pytest.approx(2.0 + 2.0 + 1.0) and visible.cpu == pytest.approx(4.5)
    assert visible.waiting == pytest.approx(3.0), "from its wait to its start"
    assert visible.between == pytest.approx(0.5 + 4.0), "before the wait, and the restart after the killed test"
    assert by_chain["hidden#0"].first_start == pytest.approx(6.0)
    table = grade_timeline.format_rows(total, rows)
    assert "visible#0" in table and "hidden#0" in table and "20.0 s" in table


def test_the_tool_reads_a_file_and_refuses_a_wrong_one(tmp_path, capsys):
    path = tmp_path / "timeline.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [_event(0, "grade"), _event(1, "spawn", "visible#0"),
                                                       _event(2, "start", "visible#0", "a"),
                                                       _event(3, "end", "visible#0", "a", cpu=1.0)]) + "\n")
    assert grade_timeline.main([str(path)]) == 0
    assert "visible#0" in capsys.readouterr().out
    (tmp_path / "log.txt").write_text("grade: finished in 3 s\n")
    with pytest.raises(SystemExit) as stop:
        grade_timeline.main([str(tmp_path / "log.txt")])
    assert "--timeline" in str(stop.value)
