"""The one batch driver (autograder/batch/driver.py) on jobs that are one-line Python commands, on
this machine's CPU slots: what a rerun skips and what it runs again, the retry, what ``collect``
sees, each job's batch.json, the dry run, the version hash, and the summary.md writer. The two
batches that use it are tested end to end in test_batch.py and test_batch_real_slurm.py."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from autograder.batch.driver import Cluster, Tally, Task, Wording, drive, summary_lines, version_hash, write_summary
from autograder.batch.executors import Job, Outcome

WORDING = Wording(command="test batch", title="Test batch", verb="run", done="ran", noun="runs", version="code")
WRITE = "import json, pathlib; pathlib.Path('out.json').write_text(json.dumps({'n': 1}))"


def _task(root: Path, key: str, code: str = WRITE, version: str = "v1") -> Task:
    folder = root / key
    job = Job(key, f"label {key}", (sys.executable, "-c", code), str(folder), str(folder / "run.log"), 60)
    return Task(job, {"version": version, "flags": ["--x"]})


def _judge(job: Job, outcome: Outcome) -> str | None:
    if outcome.returncode != 0:
        return f"exit {outcome.returncode}"
    try:
        json.loads((Path(job.log).parent / "out.json").read_text())
    except (OSError, ValueError):
        return "no out.json"
    return None


def _drive(root: Path, tasks: list[Task], **kwargs):
    collected = []
    ran = drive(tasks, Cluster.choose("local", gpus="0", jobs=2), root, _judge, WORDING, version="v1",
                outputs=("out.json",), collect=lambda task: collected.append(task.job.key), **kwargs)
    return ran, collected


def _record(root: Path, key: str) -> dict:
    return json.loads((root / key / "batch.json").read_text())


def test_a_rerun_runs_only_what_failed_or_changed(tmp_path, capsys):
    tasks = [_task(tmp_path, "good"), _task(tmp_path, "broken", "raise SystemExit(3)"), _task(tmp_path, "other")]
    ran, collected = _drive(tmp_path, tasks)
    assert ran.run.failures == {"broken": "exit 3"} and ran.run.attempts == {"good": 1, "broken": 2, "other": 1}
    assert sorted(collected) == ["good", "other"], "collect sees the jobs that succeeded, and only those"
    assert _record(tmp_path, "good")["status"] == "done" and _record(tmp_path, "good")["flags"] == ["--x"]
    broken = _record(tmp_path, "broken")
    assert broken["status"] == "failed" and broken["attempts"] == 2 and broken["returncode"] == 3, broken
    plan = "3 submission(s); 0 already ran with code v1; 3 to run on this machine, 2 CPU slot(s)"
    assert plan in capsys.readouterr().out
    done_at = (tmp_path / "good" / "out.json").stat().st_mtime_ns

    tasks[2] = _task(tmp_path, "other", version="v2")  # its code changed: its result no longer stands
    ran, collected = _drive(tmp_path, tasks)
    assert [task.job.key for task in ran.todo] == ["broken", "other"] and sorted(collected) == ["other"]
    assert "1 already ran" in capsys.readouterr().out
    assert (tmp_path / "good" / "out.json").stat().st_mtime_ns == done_at, "a done job is not run again"
    assert _record(tmp_path, "other")["version"] == "v2"


def test_a_done_record_without_a_readable_output_is_run_again(tmp_path):
    tasks = [_task(tmp_path, "good"), _task(tmp_path, "truncated")]
    _drive(tmp_path, tasks)
    (tmp_path / "truncated" / "out.json").write_text('{"n": ')  # cut short after the record was written
    ran, _ = _drive(tmp_path, tasks)
    assert [task.job.key for task in ran.todo] == ["truncated"]
    assert json.loads((tmp_path / "truncated" / "out.json").read_text()) == {"n": 1}


def test_a_failed_job_is_run_again_even_when_it_left_its_output(tmp_path):
    task = _task(tmp_path, "half", WRITE + "; raise SystemExit(1)")  # writes out.json, then fails
    _drive(tmp_path, [task])
    assert _record(tmp_path, "half")["status"] == "failed" and (tmp_path / "half" / "out.json").exists()
    ran, _ = _drive(tmp_path, [task])
    assert [task.job.key for task in ran.todo] == ["half"]


def test_a_failed_jobs_stale_output_is_removed_before_it_runs_again(tmp_path):
    task = _task(tmp_path, "flaky", "raise SystemExit(1)")
    (tmp_path / "flaky").mkdir()
    (tmp_path / "flaky" / "out.json").write_text('{"n": 0}')  # left by an older run: not this run's result
    ran, collected = _drive(tmp_path, [task])
    assert ran.run.failures == {"flaky": "exit 1"} and not (tmp_path / "flaky" / "out.json").exists()
    assert collected == []


def test_a_dry_run_prints_each_command_and_runs_nothing(tmp_path, capsys):
    tasks = [_task(tmp_path, "one"), _task(tmp_path, "two")]
    ran, collected = _drive(tmp_path, tasks, dry_run=True)
    out = capsys.readouterr().out
    assert ran is None and collected == [] and not (tmp_path / "one").exists()
    printed = [shlex.split(line) for line in out.splitlines() if line.startswith("  ")]
    assert printed == [list(task.job.argv) for task in tasks], out


def test_cluster_choice_and_its_description():
    assert Cluster.choose("local", gpus="0", jobs=3).devices == (None, None, None)
    assert Cluster.choose("local", gpus="4", gpus_per_job=2).describe() == "this machine, 2 GPU slot(s) of 2 GPUs a job"
    assert Cluster.choose("slurm").describe() == "slurm (1 GPU a job)"
    assert Cluster.choose("submitit-local", cluster_gpus=False).describe() == "submitit-local"
    with pytest.raises(ValueError, match="unknown cluster 'kubernetes'"):
        Cluster.choose("kubernetes")


def test_the_version_hash_follows_every_matching_file(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("B = 1\n")
    patterns = ("pkg/**/*.py",)
    first = version_hash(tmp_path, patterns)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "c.py").write_text("compiled")
    (tmp_path / "notes.txt").write_text("not matched")
    assert version_hash(tmp_path, patterns) == first, "caches and unmatched files do not change the version"
    (tmp_path / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    second = version_hash(tmp_path, patterns)
    assert second != first
    (tmp_path / "pkg" / "sub" / "b.py").rename(tmp_path / "pkg" / "b.py")
    assert version_hash(tmp_path, patterns) != second, "a file moved to another folder is another version"


def test_the_summary_says_counts_throughput_slowest_and_failures(tmp_path):
    tally = Tally(total=5, done=2, failed=[("s3 (Ada)", "exit 2")], seconds=360.0, where="slurm (1 GPU a job)",
                  slowest=[("Ada", 200.0), ("Grace", 100.4)], skipped=2, retried=1, version="kit abc")
    lines = summary_lines("Batch grade", tally, "graded", notes=["- a note"], body=["- CSV: x.csv"])
    assert lines == ["# Batch grade", "",
                     "- kit abc; 5 submissions; graded now 2, skipped (already graded) 2, failed 1 (retried 1)",
                     "- on slurm (1 GPU a job), 360 s wall: 20.0 submissions per hour",
                     "- slowest: Ada 200 s; Grace 100 s",
                     "- FAILED s3 (Ada): exit 2",
                     "- a note", "", "- CSV: x.csv"]
    plain = Tally(total=3, done=3, failed=[], seconds=0.0, where="NVIDIA H200")
    lines = summary_lines("Self-test", plain, "as expected", unit="entries", head=["On an H200."])
    assert lines == ["# Self-test", "", "On an H200.", "", "- 3 entries; as expected 3, failed 0",
                     "- on NVIDIA H200, 0 s wall: 0.0 entries per hour"]
    assert write_summary(tmp_path, lines) == (tmp_path / "summary.md").read_text() == "\n".join(lines) + "\n"
