"""The sandbox copy keeps only adapters.py and cs336_systems/**/*.py, from a folder or a zip,
and follows no link out of the submission; results records cannot be forged without the key."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from autograder.protocol import ForgedRecord, Signer, Verifier, new_key
from autograder.results import leaderboard_entries
from autograder.intake import copy_submission
from harness import gpus


def _submission(root: Path) -> Path:
    (root / "cs336_systems" / "sub").mkdir(parents=True)
    (root / "adapters.py").write_text("X = 1\n")
    (root / "cs336_systems" / "__init__.py").write_text("")
    (root / "cs336_systems" / "sub" / "kernel.py").write_text("Y = 2\n")
    for name in ("conftest.py", "pytest.ini", "sitecustomize.py", "torch.py", "evil.pth", "notes.txt"):
        (root / name).write_text("boom\n")
    (root / "cs336_systems" / "conftest.py").write_text("boom\n")
    (root / "cs336_systems" / "weights.pt").write_bytes(b"0" * 10)
    (root / "cs336_systems" / "__pycache__").mkdir()
    (root / "cs336_systems" / "__pycache__" / "x.pyc").write_bytes(b"0")
    return root


def test_folder_submission_keeps_only_graded_files(tmp_path):
    source = _submission(tmp_path / "sub")
    report = copy_submission(source, tmp_path / "box")
    kept = sorted(str(p.relative_to(tmp_path / "box")) for p in (tmp_path / "box").rglob("*") if p.is_file())
    assert kept == ["adapters.py", "cs336_systems/__init__.py", "cs336_systems/sub/kernel.py"]
    left = " ".join(report.left_out)
    for name in ("conftest.py", "pytest.ini", "sitecustomize.py", "torch.py", "evil.pth", "cs336_systems/conftest.py",
                 "weights.pt"):
        assert name in left, name


def test_links_out_of_the_submission_are_not_followed(tmp_path):
    secret = tmp_path / "hidden_test_secret.py"
    secret.write_text("SECRET = 42\n")
    source = _submission(tmp_path / "sub")
    (source / "cs336_systems" / "leak.py").symlink_to(secret)
    (source / "cs336_systems" / "inside.py").symlink_to(source / "cs336_systems" / "sub" / "kernel.py")
    report = copy_submission(source, tmp_path / "box")
    assert not (tmp_path / "box" / "cs336_systems" / "leak.py").exists()
    assert (tmp_path / "box" / "cs336_systems" / "inside.py").read_text() == "Y = 2\n"
    assert any("leak.py" in line and "outside" in line for line in report.left_out)


def test_zip_submission_in_a_subfolder_with_unsafe_members(tmp_path):
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("my_work/adapters.py", "X = 1\n")
        zf.writestr("my_work/cs336_systems/__init__.py", "")
        zf.writestr("my_work/cs336_systems/a.py", "A = 1\n")
        zf.writestr("my_work/conftest.py", "boom\n")
        zf.writestr("../escape.py", "boom\n")
        zf.writestr("__MACOSX/my_work/._adapters.py", "junk")
        link = zipfile.ZipInfo("my_work/cs336_systems/link.py")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    report = copy_submission(archive, tmp_path / "box")
    kept = sorted(str(p.relative_to(tmp_path / "box")) for p in (tmp_path / "box").rglob("*") if p.is_file())
    assert kept == ["adapters.py", "cs336_systems/__init__.py", "cs336_systems/a.py"]
    assert not (tmp_path / "escape.py").exists()
    assert any("symbolic link" in line for line in report.left_out)


def test_empty_upload_gets_an_adapters_that_explains(tmp_path):
    (tmp_path / "upload").mkdir()
    report = copy_submission(tmp_path / "upload", tmp_path / "box")
    assert "make_submission.sh" in (tmp_path / "box" / "adapters.py").read_text()
    assert (tmp_path / "box" / "cs336_systems" / "__init__.py").exists()
    assert report.added


def test_records_need_the_key_and_the_order(tmp_path):
    import os

    from confine.frames import Closed, read_frame

    key = new_key()
    read_fd, write_fd = os.pipe()
    signer = Signer(key, write_fd)
    signer.send({"type": "start", "nodeid": "a"})
    signer.send({"type": "result", "nodeid": "a", "outcome": "passed"})
    os.close(write_fd)
    lines = [read_frame(read_fd), read_frame(read_fd)]  # one frame each (confine/frames.py)
    with pytest.raises(Closed):
        read_frame(read_fd)
    verifier = Verifier(key)
    assert verifier.verify(lines[0])["type"] == "start"
    assert verifier.verify(lines[1])["outcome"] == "passed"
    with pytest.raises(ForgedRecord):
        Verifier(key).verify(lines[1])  # out of order (replayed)
    with pytest.raises(ForgedRecord):
        Verifier(new_key()).verify(lines[0])  # another run's key
    forged = lines[0].replace(b'"start"', b'"result"')
    with pytest.raises(ForgedRecord):
        Verifier(key).verify(forged)


def test_leaderboard_entries_accept_both_shapes():
    assert leaderboard_entries({"fwd+bwd ms": 5.3}) == [{"name": "fwd+bwd ms", "value": 5.3, "order": "asc"}]
    given = [{"name": "ms", "value": 1.0, "order": "desc"}]
    assert leaderboard_entries(given) == given
    with pytest.raises(ValueError):
        leaderboard_entries(3)


def test_leaderboard_field_is_written_when_known():
    from autograder.manifest import load_manifest
    from autograder.results import results_json
    from autograder.selftests.gradescope_schema import problems_with

    results = results_json([], load_manifest(), execution_time=1.0, output="x",
                           leaderboard=leaderboard_entries({"fwd+bwd ms": 5.3}))
    assert results["leaderboard"][0]["value"] == 5.3 and problems_with(results) == []


def test_require_gpu_fails_loudly_without_one(tmp_path, capsys):
    from autograder.__main__ import main
    from autograder.selftests.gradescope_schema import problems_with

    if gpus.count():
        pytest.skip("this runner has a GPU")
    status = main(["grade", str(tmp_path), "--out", str(tmp_path / "out"), "--require-gpu", "-q"])
    assert status == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    import json

    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert problems_with(results) == [] and "require-gpu" in results["output"]


def test_a_missing_submission_is_graded_as_empty_and_says_so(tmp_path):
    """A path that holds no submission (a typo, an upload that never came) still gets a complete
    results.json: every chosen problem at 0, and the output says no submission was found."""
    import json

    from autograder.__main__ import main

    missing = tmp_path / "no-such-folder"
    status = main(["grade", str(missing), "--out", str(tmp_path / "out"), "--same-user", "-q",
                   "--problems", "mixed_precision_accumulation", "--suites", "visible"])
    assert status == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["score"] == 0
    assert f"no submission found: {missing}" in results["output"]
