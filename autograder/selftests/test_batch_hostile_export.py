"""The hostile export (fixtures/attacks/hostile_export) against ``autograder batch``.

An export's ids become folders under ``--out`` and its names reach a spreadsheet. The batch must
refuse ids that are not plain folder names and exports holding links, naming each, before it
grades or writes anything; it must never read or write outside the export and ``--out``; and
scores.csv must carry every formula-like cell with a leading ' so no spreadsheet runs it.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch.export import ExportError, plain_id, read_export
from autograder.batch.report import FORMULA_STARTS, spreadsheet_safe
from fixtures.attacks.exports import HONEST_ID, build, load

KIT = Path(__file__).resolve().parents[2]
ATTACK = load()


def _batch(export: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out), "--gpus", "0",
               "--secret", "selftest-course-secret", *flags]
    return subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=900)


def _tree(root: Path, skip: Path) -> dict[str, int]:
    """Every path under ``root`` (links not followed) but ``skip``'s, with its mtime."""
    found = {}
    for top, dirs, files in os.walk(root):
        if Path(top) == skip or skip in Path(top).parents:
            continue
        for name in dirs + files:
            path = os.path.join(top, name)
            if Path(path) == skip:
                continue
            found[os.path.relpath(path, root)] = os.lstat(path).st_mtime_ns
    return found


@pytest.mark.parametrize("variant", ["ids", "links"])
def test_a_hostile_export_is_refused_naming_each_id_and_nothing_is_written(tmp_path, variant):
    tmp_path.chmod(0o755)
    export, outside = build(tmp_path, variant, ATTACK)
    out = tmp_path / "out"
    before = _tree(tmp_path, out)
    result = _batch(export, out, "--problems", ATTACK.problem)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    named = ATTACK.refused_ids if variant == "ids" else ATTACK.links
    for key in named:
        assert repr(key)[:60] in result.stderr, (key, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert not (out / "submissions").exists(), "a refused export grades nothing"
    assert _tree(tmp_path, out) == before, "nothing outside --out was created or changed"
    assert not list(outside.rglob("results.json")) and not list(tmp_path.glob("**/escape_out/results.json"))


def test_formula_cells_reach_the_csv_escaped(tmp_path):
    tmp_path.chmod(0o755)
    export, _ = build(tmp_path, "formulas", ATTACK)
    out = tmp_path / "out"
    result = _batch(export, out, "--problems", ATTACK.problem, "--jobs", "1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = (out / "scores.csv").read_text(encoding="utf-8")
    with (out / "scores.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS), (cell, row)
    body = rows[1:]
    assert len(body) == len(ATTACK.students)
    header = rows[0]
    for row, (name, sid, email) in zip(body, ATTACK.students):
        cells = dict(zip(header, row))
        assert (cells["Name"], cells["SID"], cells["Email"]) == ("'" + name, "'" + sid, "'" + email), cells
        assert cells["Submission"] == HONEST_ID
    assert "\x1b" not in result.stdout and "=HYPERLINK" not in text.replace("'=HYPERLINK", "")


def test_plain_ids_and_safe_cells():
    for key in ATTACK.refused_ids:
        assert plain_id(key) is not None, key
    for key in ("submission_281934011", "281934011", "a.b-c_d"):
        assert plain_id(key) is None, key
    assert spreadsheet_safe("Ada") == "Ada" and spreadsheet_safe("=1") == "'=1" and spreadsheet_safe("") == ""


def test_read_export_names_every_refused_id(tmp_path):
    export, _ = build(tmp_path, "ids", ATTACK)
    with pytest.raises(ExportError) as raised:
        read_export(export, tmp_path / "work")
    for key in ATTACK.refused_ids:
        assert repr(key)[:60] in str(raised.value), key
