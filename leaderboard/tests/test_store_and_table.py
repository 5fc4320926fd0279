"""The results store (JSON lines) and the table rendered from it (Markdown and PNG)."""

import pytest

from leaderboard.store import append_record, read_records
from leaderboard.table import ranking, render_markdown, write_table


def record(name, time_ms, accepted=True, mode="official", **extra):
    return {
        "name": name,
        "accepted": accepted,
        "refusals": [] if accepted else [{"code": "side_stream", "message": "hidden work"}],
        "checks": {},
        "mode": mode,
        "date": "2026-11-29T10:00:00+00:00",
        "submission_hash": "ab" * 32,
        "time_ms": time_ms,
        "tflops": 1.924e12 / (time_ms * 1e-3) / 1e12 if time_ms else None,
        "pct_of_matmul": 50.0,
        "random_dO_ms": time_ms,
        "iqr_pct": 0.5,
        "floor_ms": 2.77,
        "environment": {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0"},
        **extra,
    }


def test_store_round_trip_skips_a_bad_line(tmp_path, capsys):
    store = tmp_path / "deep" / "records.jsonl"
    append_record(record("alice", 6.0), store)
    with store.open("a") as f:
        f.write("{not json\n")
    append_record(record("bob", 5.0), store)
    assert [r["name"] for r in read_records(store)] == ["alice", "bob"]
    assert "records.jsonl:2 is not valid JSON" in capsys.readouterr().err
    assert read_records(tmp_path / "absent.jsonl") == []
    with pytest.raises(ValueError, match="submission_hash"):
        append_record({"name": "x", "accepted": True}, store)


def test_ranking_keeps_each_names_fastest_accepted_official_run():
    records = [
        record("alice", 6.0),
        record("alice", 5.5),
        record("bob", 0.1, accepted=False, time_ms_note="refused"),
        record("bob", 7.0),
        record("carol", 4.0, mode="quick"),
    ]
    rows = ranking(records)
    assert [(r["name"], r["time_ms"], r["runs"]) for r in rows] == [("alice", 5.5, 2), ("bob", 7.0, 1)]
    assert [r["name"] for r in ranking(records, include_unofficial=True)] == ["carol", "alice", "bob"]


def test_markdown_states_conditions_ranks_and_refusals():
    text = render_markdown([record("bob", 7.0), record("alice", 5.5), record("eve", 0.2, accepted=False)])
    assert "1.924 TFLOP" in text and "rep=10000, warmup=1000" in text
    assert text.index("| 1 | alice | 5.500 |") < text.index("| 2 | bob | 7.000 |")
    assert "| eve |" in text and "side_stream" in text
    assert "No accepted runs yet." in render_markdown([])


def test_write_table_makes_markdown_and_png(tmp_path):
    markdown, png = write_table([record("alice", 5.5), record("bob", 7.0)], tmp_path / "out")
    assert markdown.read_text().startswith("# FlashAttention-2 leaderboard")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _, empty_png = write_table([], tmp_path / "empty")
    assert empty_png.stat().st_size > 0


def test_the_floor_label_stays_inside_the_axes_clear_of_the_title_and_bars():
    import matplotlib.pyplot as plt

    from leaderboard.table import chart

    for count in (1, 3, 12):
        fig = chart([record(f"student{i}", 3.0 + i) for i in range(count)])
        try:
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            ax = fig.axes[0]
            (label,) = [text for text in ax.texts if "physical floor" in text.get_text()]
            box = label.get_window_extent(renderer)
            assert not box.overlaps(ax.title.get_window_extent(renderer)), f"{count} rows: the label hits the title"
            assert ax.get_window_extent(renderer).contains(box.x0, box.y1), f"{count} rows: the label leaves the axes"
            for bar in ax.patches:
                assert not box.overlaps(bar.get_window_extent(renderer)), f"{count} rows: the label hits a bar"
        finally:
            plt.close(fig)


def test_the_header_does_not_describe_the_official_problem_above_rows_timed_otherwise():
    dry = {"problem": "2 x 64 x 16, float32, causal, cpu"}
    only_dry = render_markdown([record("alice", 40.0, mode="dry-run", **dry)], include_unofficial=True)
    first = only_dry.split("\n| # |")[0]
    assert first.index("Not the official timing") < first.index("sequence 16384"), first
    assert "`dry-run` runs: 2 x 64 x 16, float32, causal, cpu" in first
    mixed = render_markdown([record("bob", 5.0), record("alice", 40.0, mode="dry-run", **dry)], include_unofficial=True)
    assert "timed under other conditions" in mixed.split("\n| # |")[0] and "| dry-run |" in mixed
    official = render_markdown([record("bob", 5.0)])
    assert "other conditions" not in official and "Not the official" not in official
