"""The whole pipeline on a CPU, as a user runs it: ``run --cpu``, the store, ``table``."""

import json

from leaderboard.__main__ import main
from fixtures import materialize
from fixtures.leaderboard import get
from leaderboard.store import read_records


def test_cpu_run_accepts_honest_refuses_patched_timers_and_tables_both(tmp_path, capfd):
    store = tmp_path / "records.jsonl"
    honest_slow, patched_timers = (materialize(get(name), tmp_path / name) for name in ("honest_slow", "cheat_patched_timers"))
    assert main(["run", str(honest_slow), "--name", "honest", "--cpu", "--store", str(store)]) == 0
    assert main(["run", str(patched_timers), "--name", "patcher", "--cpu", "--store", str(store)]) == 1
    out = capfd.readouterr()
    assert "[leaderboard" in out.err  # the worker's progress reaches the terminal
    assert "ACCEPTED honest" in out.out and "REFUSED patcher" in out.out

    honest, patcher = read_records(store)
    assert honest["accepted"] and honest["name"] == "honest" and len(honest["submission_hash"]) == 64
    assert honest["time_ms"] > 0 and honest["floor_ms"] > 0 and honest["mode"] == "cpu"
    assert {"lazy_output", "mutated_inputs", "incorrect", "cached_outputs", "library_attention", "ones_dO", "below_floor"} <= {
        check for check, status in honest["checks"].items() if status == "passed"
    }
    assert [r["code"] for r in patcher["refusals"]] == ["patched_timers"]
    assert "time.perf_counter was replaced" in patcher["refusals"][0]["message"]
    json.dumps(honest)  # records are plain JSON

    assert main(["table", "--store", str(store), "--out", str(tmp_path / "table"), "--all"]) == 0
    markdown = (tmp_path / "table" / "leaderboard.md").read_text()
    assert "| 1 | honest |" in markdown and "| patcher |" in markdown and "patched_timers" in markdown
    assert (tmp_path / "table" / "leaderboard.png").exists()
