"""gpu_checks/mixed_class.py, the class-throughput check, still builds its class and writes its summary.

Its real run needs a GPU and about half an hour; these tests keep it from rotting between runs:
``--dry`` builds every member (so every fixture it names still exists and applies) and writes the
summary from stand-in grades; one real grade on the CPU (the corrupt zip: the intake rejects it
in about a second) goes through the grader's own command line and results.json.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mixed_class():
    spec = importlib.util.spec_from_file_location("mixed_class", KIT / "gpu_checks" / "mixed_class.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _rows(summary: Path) -> dict[str, list[str]]:
    """{member: its table cells} from a summary.md."""
    lines = [line for line in summary.read_text().splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


def test_a_dry_run_builds_the_whole_class_and_writes_one_row_each(mixed_class, tmp_path):
    assert mixed_class.main([str(tmp_path / "out"), "--dry"]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "DRY RUN" in summary and "- torch " in summary and "load average" in summary, summary
    rows = _rows(tmp_path / "out" / "summary.md")
    assert list(rows) == [member.name for member in mixed_class.CLASS], summary
    kinds = [member.kind for member in mixed_class.CLASS]
    assert sum(kind.startswith("one-bug") for kind in kinds) == 6 and "stub" in kinds and "corrupt zip" in kinds
    built = tmp_path / "out" / "submissions"
    for member in mixed_class.CLASS:
        if member.source.startswith("fixtures/") and member.kind != "correct":
            assert (built / member.name).is_dir(), f"{member.name} was not built"
    assert (built / "zip_bad_crc.zip").is_file()


def test_a_cpu_grade_fills_its_row_from_the_grader(mixed_class, tmp_path):
    assert mixed_class.main([str(tmp_path / "out"), "--cpu", "--only", "zip_bad_crc"]) == 0
    row = _rows(tmp_path / "out" / "summary.md")["zip_bad_crc"]
    results = json.loads((tmp_path / "out" / "zip_bad_crc" / "results.json").read_text())
    failed = sum(test["status"] == "failed" for test in results["tests"])
    assert failed and row[5] == f"{failed} of {len(results['tests'])}", row
    assert "DRY RUN" not in (tmp_path / "out" / "summary.md").read_text()


def test_an_unknown_member_is_refused_before_grading(mixed_class, tmp_path, capsys):
    assert mixed_class.main([str(tmp_path / "out"), "--only", "no_such_submission"]) == 2
    assert "no member named no_such_submission" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_costliest_test_is_read_from_the_timeline(mixed_class, tmp_path):
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text("".join(json.dumps(event) + "\n" for event in (
        {"event": "end", "nodeid": "tests/a.py::x", "cpu": 2.0}, {"event": "end", "nodeid": "tests/b.py::y", "cpu": 7.5},
        {"event": "end", "nodeid": "tests/c.py::z", "cpu": None}, {"event": "start", "nodeid": "tests/d.py::w"})))
    assert mixed_class.costliest(timeline) == ("b.py::y", 7.5)
    assert mixed_class.costliest(tmp_path / "none.jsonl") == ("-", 0.0)


def test_a_batch_run_grades_the_class_through_one_export(mixed_class, tmp_path):
    """``--batch``: one Gradescope export, one ``autograder batch``; each row from that batch's own records."""
    assert mixed_class.main([str(tmp_path / "out"), "--batch", "--cpu", "--only", "reference,zip_bad_crc"]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    rows = _rows(tmp_path / "out" / "summary.md")
    assert list(rows) == ["reference", "zip_bad_crc"] and "in one batch" in summary, summary
    folder = tmp_path / "out" / "batch" / "submissions" / "submission_9100002"
    record = json.loads((folder / "batch.json").read_text())
    results = json.loads((folder / "results.json").read_text())
    assert record["status"] == "done" and float(rows["zip_bad_crc"][2]) == record["seconds"] > 0, (record, rows)
    assert results["extra_data"]["no_test_ran"] and rows["zip_bad_crc"][4] == "0.00", rows
    assert (folder / "timeline.jsonl").read_text().startswith("{"), "the batch's grade wrote no timeline"
