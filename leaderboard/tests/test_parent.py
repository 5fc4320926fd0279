"""The trusted parent: the submission hash, the record summary and the command line's refusals."""

import shutil
import zipfile

import pytest

from leaderboard.__main__ import main
from fixtures import materialize
from fixtures.leaderboard import get
from leaderboard.parent import LINK_ROOTS, describe, submission_files
from leaderboard.store import ROOT, read_records
from harness import gpus
from harness.submission import MAX_DATA_BYTES, MAX_FILE_BYTES, SubmissionError, files_hash, submission_hash


def test_hash_covers_exactly_the_submission_files(tmp_path):
    copy = materialize(get("honest_slow"), tmp_path / "copy")
    source = tmp_path / "linked"  # the same submission with adapters.py a link to the kit's, as reference/'s is
    shutil.copytree(copy, source)
    (source / "adapters.py").unlink()
    (source / "adapters.py").symlink_to(ROOT / "adapters.py")
    assert list(submission_files(copy)) == ["adapters.py", "cs336_systems/__init__.py",
                                            "cs336_systems/flash_attention_triton.py",
                                            "cs336_systems/slow_flash_attention.py"]
    original = files_hash(submission_files(copy))
    assert original == files_hash(submission_files(source))  # symlinked adapters.py: its contents count
    assert submission_hash(copy) == submission_hash(source, LINK_ROOTS) == original  # the batch's key is the record's
    (copy / "cs336_systems" / "notes.md").write_text("not part of a submission")
    (copy / "cs336_systems" / "__pycache__").mkdir()
    (copy / "cs336_systems" / "__pycache__" / "kernel.cpython-311.pyc").write_bytes(b"cache")
    assert files_hash(submission_files(copy)) == original
    (copy / "cs336_systems" / "tiles.json").write_text('{"BLOCK_Q": 64}')  # data the code may read: graded, timed
    assert files_hash(submission_files(copy)) != original
    (copy / "cs336_systems" / "tiles.json").unlink()
    kernel = copy / "cs336_systems" / "flash_attention_triton.py"
    kernel.write_text(kernel.read_text() + "\n# changed\n")
    assert files_hash(submission_files(copy)) != original


def test_a_file_that_breaks_the_graders_rule_is_not_timed(tmp_path, capsys):
    """A link out of the submission is never followed and a file over the grader's size limit is
    never dropped quietly: the run is refused, naming the file and the fix."""
    secret = tmp_path / "staff_only.py"
    secret.write_text("SECRET = 42\n")
    copy = materialize(get("honest_slow"), tmp_path / "sub")
    (copy / "cs336_systems" / "leak.py").symlink_to(secret)
    with pytest.raises(SubmissionError, match=r"cs336_systems/leak\.py \(symbolic link to a file outside the submission\)"):
        submission_files(copy)
    assert main(["run", str(copy), "--name", "x", "--cpu", "--same-user"]) == 3  # the submission itself cannot be run: 3, never retried by a batch
    err = capsys.readouterr().err
    assert "not timed" in err and "cs336_systems/leak.py" in err and "readlink -f" in err, err
    (copy / "cs336_systems" / "leak.py").unlink()
    (copy / "cs336_systems" / "big.py").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(SubmissionError, match=r"cs336_systems/big\.py \(larger than 2 MiB\).*each \.py file at most 2 MiB"):
        submission_files(copy)
    (copy / "cs336_systems" / "big.py").unlink()
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
        for path in sorted(copy.rglob("*.py")):
            out.write(path, path.relative_to(copy).as_posix())
        out.writestr("cs336_systems/tiles.json", b" " * (MAX_DATA_BYTES + 1))
    assert main(["run", str(archive), "--name", "x", "--cpu", "--same-user"]) == 3  # the submission itself cannot be run: 3, never retried by a batch
    err = capsys.readouterr().err
    assert "not timed" in err and "cs336_systems/tiles.json (larger than 1 MiB)" in err, err


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


@pytest.mark.skipif(gpus.count() > 0, reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("command", [["run", "reference", "--name", "ref"], ["selftest"]])
def test_without_a_gpu_run_and_selftest_refuse_clearly(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU found" in err and "--cpu" in err


def test_a_directory_that_is_no_submission_is_refused(tmp_path, capsys):
    assert main(["run", str(tmp_path), "--name", "x", "--cpu"]) == 3  # the submission itself cannot be run: 3, never retried by a batch
    assert "adapters.py" in capsys.readouterr().err


def test_a_partial_selftest_never_replaces_the_full_runs_records(tmp_path):
    from leaderboard.selftest import DEFAULT_OUT, output_dir

    assert output_dir(DEFAULT_OUT, None) == DEFAULT_OUT
    assert output_dir(DEFAULT_OUT, ["honest_slow", "cheat_sdpa"]) == DEFAULT_OUT / "only-cheat_sdpa-honest_slow"
    assert output_dir(tmp_path, ["honest_slow"]) == tmp_path  # a folder the user chose is used as given


def test_without_root_run_refuses_unless_same_user(monkeypatch, capsys, tmp_path):
    import leaderboard.worker_setup

    monkeypatch.setattr(leaderboard.worker_setup, "is_root", lambda: False)
    assert main(["run", str(materialize(get("honest_slow"), tmp_path / "honest_slow")), "--name", "x", "--cpu"]) == 2
    err = capsys.readouterr().err
    assert "not root" in err and "--same-user" in err and "unprivileged" in err


def test_one_flag_means_one_thing_and_old_flags_name_the_new_one(capsys):
    assert main(["run", "reference", "--name", "x", "--dry-run"]) == 2
    assert "--cpu" in capsys.readouterr().err
    assert main(["selftest", "--dry-run"]) == 2
    assert "--cpu" in capsys.readouterr().err
    assert main(["batch", "no-such-export", "--timing-dry-run"]) == 2
    assert "--cpu" in capsys.readouterr().err
    from leaderboard.__main__ import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    for name in ("run", "selftest", "batch"):
        flags = {flag: action.help for action in commands[name]._actions for flag in action.option_strings}
        assert flags["--cpu"].startswith("CPU:"), (name, flags["--cpu"])
    batch_flags = {flag: action.help for action in commands["batch"]._actions for flag in action.option_strings}
    assert batch_flags["--dry-run"].startswith("print what would run"), batch_flags["--dry-run"]
    for argv in (["run", "reference", "--name", "x"], ["selftest"]):  # --unisolated: the old spelling, still accepted
        assert build_parser().parse_args([*argv, "--unisolated"]).same_user, argv
        assert not build_parser().parse_args(argv).same_user, argv


def test_a_zip_or_a_folder_holding_only_a_zip_is_read_as_the_grader_reads_it(tmp_path, capsys):
    import zipfile

    source = materialize(get("honest_slow"), tmp_path / "honest_slow")
    folder = tmp_path / "submission_1"
    folder.mkdir()
    with zipfile.ZipFile(folder / "submission.zip", "w") as archive:
        for path in sorted(source.rglob("*.py")):
            archive.write(path, path.relative_to(source).as_posix())
    store = tmp_path / "records.jsonl"
    for given in (folder, folder / "submission.zip"):
        code = main(["run", str(given), "--name", "zipped", "--cpu", "--store", str(store)])
        captured = capsys.readouterr()
        assert "does not exist" not in captured.err and "has no adapters.py" not in captured.err, captured.err
        assert code in (0, 1), captured.err[-2000:]
    records = read_records(store)
    assert [record["submission"] for record in records] == [str(folder / "submission.zip")] * 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "submission.zip").write_bytes((folder / "submission.zip").read_bytes()[:200])
    assert main(["run", str(broken), "--name", "broken", "--cpu"]) == 3  # the submission itself cannot be run: 3, never retried by a batch
    assert "your zip is corrupt" in capsys.readouterr().err


def test_the_batch_code_version_covers_every_module_the_worker_runs(tmp_path):
    """A cached timing is reused only under the same code: a change to confine/ or to a kit module
    the worker imports (not only leaderboard/) must change the batch's code version."""
    from autograder.batch.driver import version_hash
    from leaderboard.batch import CODE_FILES
    from leaderboard.worker_setup import WORKER_MODULES

    for relative in ("leaderboard/parent.py", *WORKER_MODULES):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("# v1\n")
    before = version_hash(tmp_path, CODE_FILES)
    for relative in ("confine/frames.py", "harness/flash_tolerances.py", "leaderboard/parent.py"):
        path = tmp_path / relative
        path.write_text("# v2\n")
        after = version_hash(tmp_path, CODE_FILES)
        assert after != before, f"changing {relative} left the code version at {before}"
        before = after


def test_the_profilers_trace_lines_stay_out_of_a_runs_output():
    """torch.profiler prints ``USDT:... profiler_start`` lines (the worker profiles one call): noise."""
    import io
    import subprocess
    import sys

    from leaderboard.parent import _relay

    code = ("import sys, torch\nfrom torch.profiler import profile, ProfilerActivity\n"
            "with profile(activities=[ProfilerActivity.CPU]):\n    torch.ones(3) + 1\n"
            "print('the worker says this', file=sys.stderr)\n")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300).stderr
    out = io.StringIO()
    _relay(io.BytesIO(printed), out)
    assert "the worker says this" in out.getvalue() and "USDT:" not in out.getvalue(), out.getvalue()
