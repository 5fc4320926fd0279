"""The results store (JSON lines) and the table rendered from it (Markdown and PNG)."""

import subprocess

import pytest

from leaderboard import store as store_module
from leaderboard.__main__ import main
from leaderboard.store import DEFAULT_STORE, ROOT, STORE_DIR, append_record, read_records
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


def test_a_refused_runs_error_says_what_it_was():
    """A stub's NotImplementedError (or any other error) is not shown as a bare ``error``."""
    stub = record("stubs", None, accepted=False, refusals=[{"code": "error", "message": (
        "NotImplementedError during import: cs336_systems/flash_attention_triton.py: FlashAttentionTriton.forward "
        "is not implemented yet. Write it (see handout/README.md, §2.4)")}])
    crash = record("crash", None, accepted=False, refusals=[{"code": "error", "message": "ValueError | during timing"}])
    text = render_markdown([stub, crash])
    assert "not implemented: cs336_systems/flash_attention_triton.py: FlashAttentionTriton.forward" in text, text
    assert "error: ValueError / during timing" in text, text


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
    small = {"problem": "2 x 64 x 16, float32, causal, cpu"}
    only_cpu = render_markdown([record("alice", 40.0, mode="cpu", **small)], include_unofficial=True)
    first = only_cpu.split("\n| # |")[0]
    assert first.index("Not the official timing") < first.index("sequence 16384"), first
    assert "`cpu` runs: 2 x 64 x 16, float32, causal, cpu" in first
    mixed = render_markdown([record("bob", 5.0), record("alice", 40.0, mode="cpu", **small)], include_unofficial=True)
    assert "timed under other conditions" in mixed.split("\n| # |")[0] and "| cpu |" in mixed
    # Stores written before --cpu had its one name hold mode "dry-run": still marked, never ranked as official.
    old = render_markdown([record("bob", 5.0), record("carol", 40.0, mode="dry-run", **small)], include_unofficial=True)
    assert "`dry-run` runs: 2 x 64 x 16" in old and "| dry-run |" in old
    assert "carol" not in render_markdown([record("bob", 5.0), record("carol", 40.0, mode="dry-run", **small)])
    official = render_markdown([record("bob", 5.0)])
    assert "other conditions" not in official and "Not the official" not in official


def test_the_live_store_and_outputs_sit_outside_the_code_package_and_git_ignores_them():
    from leaderboard.__main__ import build_parser
    from leaderboard.selftest import DEFAULT_OUT
    from leaderboard.training_step.run import DEFAULT_STORE as TRAINING_STORE

    parser = build_parser()
    table_out = parser.parse_args(["table"]).out
    batch_out = parser.parse_args(["batch", "export.zip"]).out
    defaults = [DEFAULT_STORE, DEFAULT_OUT, TRAINING_STORE, table_out, batch_out]
    assert all(path.parent == STORE_DIR or path == STORE_DIR for path in defaults), defaults
    assert not [path for path in defaults if ROOT / "leaderboard" in path.parents], defaults
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    for path in defaults:
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(path / "x")], capture_output=True)
        assert ignored.returncode == 0, f"{path} is not ignored by git"


def test_a_store_left_in_the_code_package_stops_the_commands_and_says_how_to_move_it(tmp_path, monkeypatch, capsys):
    old = tmp_path / "leaderboard" / "results"
    old.mkdir(parents=True)
    monkeypatch.setattr(store_module, "OLD_STORE_DIR", old)
    out = ["--out", str(tmp_path / "table")]
    assert main(["table", *out]) == 0  # nothing left behind: the default store is used
    append_record(record("alice", 6.0), old / "records.jsonl")
    for command in (["table", *out], ["run", "reference", "--name", "x"], ["batch", "export.zip", "--dry-run"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert f"leaderboard {command[0]}: the leaderboard's store has moved out of the code package" in err, err
        assert f"cat {old / 'records.jsonl'} >> {DEFAULT_STORE} && rm {old / 'records.jsonl'}" in err, err
    assert main(["table", "--store", str(old / "records.jsonl"), *out]) == 0  # the old file, named, still works
    assert "alice" in (tmp_path / "table" / "leaderboard.md").read_text()


def test_a_training_step_store_left_in_the_code_package_stops_its_runs(tmp_path, monkeypatch, capsys):
    from leaderboard.training_step.__main__ import main as training_step_main

    monkeypatch.setattr(store_module, "OLD_STORE_DIR", tmp_path)
    (tmp_path / "training_step.jsonl").write_text("{}\n")
    assert training_step_main(["run", "reference"]) == 2
    err = capsys.readouterr().err
    assert "has moved out of the code package" in err and f"rm {tmp_path / 'training_step.jsonl'}" in err, err
