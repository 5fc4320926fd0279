"""The trusted parent: the submission hash, the record summary and the command line's refusals."""

import shutil

import pytest
import torch

from leaderboard.__main__ import main
from leaderboard.fixtures import FIXTURES
from leaderboard.runner import describe, submission_files, submission_hash


def test_hash_covers_exactly_the_submission_files(tmp_path):
    source = FIXTURES[0].path
    copy = tmp_path / "copy"
    shutil.copytree(source, copy, symlinks=False)
    assert [f.name for f in submission_files(copy)] == ["adapters.py", "__init__.py", "flash_attention_triton.py", "slow_flash_attention.py"]
    original = submission_hash(copy)
    assert original == submission_hash(source)  # symlinked adapters.py: its contents count
    (copy / "cs336_systems" / "notes.txt").write_text("not code")
    assert submission_hash(copy) == original
    kernel = copy / "cs336_systems" / "flash_attention_triton.py"
    kernel.write_text(kernel.read_text() + "\n# changed\n")
    assert submission_hash(copy) != original


def test_describe_names_every_reason():
    text = describe(
        {
            "name": "x",
            "submission": "s",
            "mode": "quick",
            "run_s": 3.0,
            "accepted": False,
            "refusals": [{"code": "ones_dO", "message": "faster"}, {"code": "below_floor", "message": "too fast"}],
        }
    )
    assert text.startswith("REFUSED x") and "ones_dO: faster" in text and "below_floor: too fast" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("command", [["run", "reference", "--name", "ref"], ["selftest"]])
def test_without_a_gpu_run_and_selftest_refuse_clearly(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU found" in err and "--dry-run" in err


def test_a_directory_that_is_no_submission_is_refused(tmp_path, capsys):
    assert main(["run", str(tmp_path), "--name", "x", "--dry-run"]) == 2
    assert "adapters.py" in capsys.readouterr().err


def test_a_partial_selftest_never_replaces_the_full_runs_records(tmp_path):
    from leaderboard.selftest import DEFAULT_OUT, output_dir

    assert output_dir(DEFAULT_OUT, None) == DEFAULT_OUT
    assert output_dir(DEFAULT_OUT, ["honest_slow", "cheat_sdpa"]) == DEFAULT_OUT / "only-cheat_sdpa-honest_slow"
    assert output_dir(tmp_path, ["honest_slow"]) == tmp_path  # a folder the user chose is used as given


def test_without_root_run_refuses_unless_unisolated(monkeypatch, capsys):
    import leaderboard.sandbox

    monkeypatch.setattr(leaderboard.sandbox, "is_root", lambda: False)
    assert main(["run", str(FIXTURES[0].path), "--name", "x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "not root" in err and "--unisolated" in err and "unprivileged" in err
