"""``python -m autograder batch``: a fake Gradescope export of six submissions (the reference with
two group members, the stubs, two FlashAttention mutants, an attack, a corrupt zip) graded on this
CPU with the local executor, two at a time, on two cheap problems; then graded again (nothing is);
then the Slurm path through submitit's own local executor, and the sbatch script of --dry-run."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch.executors import Job, Outcome, run_with_retry
from autograder.batch.export import read_export
from autograder.selftests.fake_export import SUBMISSIONS, build_export
from autograder.selftests.gradescope_schema import hidden_shown_early, problems_with

KIT = Path(__file__).resolve().parents[2]
PROBLEMS = "memory_profiling,flash_forward_pytorch"


def _batch(export: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out), *flags]
    return subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    root.chmod(0o755)
    export = build_export(root)
    out = root / "out"
    first = _batch(export, out, "--problems", PROBLEMS, "--jobs", "2", "--gpus", "0")
    logs = {path: path.stat().st_mtime_ns for path in out.glob("submissions/*/grade.log")}
    second = _batch(export, out, "--problems", PROBLEMS, "--jobs", "2", "--gpus", "0")
    return export, out, first, second, logs


def _rows(out: Path) -> list[dict]:
    with (out / "scores.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_submission_gets_a_valid_results_json(batch):
    export, out, first, _, _ = batch
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for folder in SUBMISSIONS:
        results = json.loads((out / "submissions" / folder / "results.json").read_text())
        assert problems_with(results) == [], folder
        assert hidden_shown_early(results) == [], folder
        assert (out / "submissions" / folder / "grade.log").stat().st_size > 0
        assert json.loads((out / "submissions" / folder / "batch.json").read_text())["status"] == "done"
    corrupt = json.loads((out / "submissions" / "submission_281934066" / "results.json").read_text())
    assert corrupt["score"] == 0 and "No test was run" in corrupt["output"]


def test_every_student_gets_a_csv_row_whose_total_is_the_results_score(batch):
    _, out, _, _, _ = batch
    rows = _rows(out)
    expected = [(sid, folder) for folder, (_, students) in SUBMISSIONS.items() for _, sid, _ in students]
    assert [(row["SID"], row["Submission"]) for row in rows] == expected
    assert list(rows[0])[:3] == ["Name", "SID", "Email"] and "Total Score" in rows[0]
    for row in rows:
        results = json.loads((out / "submissions" / row["Submission"] / "results.json").read_text())
        assert abs(float(row["Total Score"]) - results["score"]) < 1e-3, row
        parts = sum(float(row[name]) for name in PROBLEMS.split(","))
        assert abs(parts - float(row["Total Score"])) < 1e-3, row
        assert row["Status"] == "graded"
    by_kind = {SUBMISSIONS[row["Submission"]][0]: float(row["Total Score"]) for row in rows}
    assert by_kind["reference"] > max(by_kind["stubs"], by_kind["corrupt_zip"]), by_kind
    assert (out / "histogram.md").read_text().count("| memory_profiling |") == 1
    assert (out / "histogram.png").stat().st_size > 0


def _kit(output: str) -> str:
    return re.search(r"graded with kit (\w+)", output).group(1)


def test_a_second_run_grades_nothing_again(batch):
    _, out, first, second, logs = batch
    assert second.returncode == 0, second.stdout[-3000:]
    if _kit(first.stdout) != _kit(second.stdout):
        assert "0 already graded" in second.stdout, "a changed kit must regrade everything"
        pytest.skip("the kit's grading files changed between the two runs (edited meanwhile): all were regraded")
    assert f"{len(SUBMISSIONS)} already graded" in second.stdout and "0 to grade" in second.stdout
    assert {path: path.stat().st_mtime_ns for path in out.glob("submissions/*/grade.log")} == logs
    assert len(_rows(out)) == sum(len(students) for _, students in SUBMISSIONS.values())


def test_the_export_is_read_from_its_metadata(batch):
    export, out, *_ = batch
    submissions = read_export(export, out)
    assert [s.id for s in submissions] == list(SUBMISSIONS)
    assert submissions[0].students[1].email == "babbage@stanford.edu" and submissions[0].students[0].sid == "05550101"


def test_a_failed_job_is_retried_once_then_reported():
    calls = []

    def run(jobs):
        calls.append([job.key for job in jobs])
        return [Outcome(job.key, 0 if job.key == "good" or len(calls) == 2 and job.key == "flaky" else 1, 1.0)
                for job in jobs]

    jobs = [Job(key, key, ("true",), ".", "/dev/null", 10) for key in ("good", "flaky", "broken")]
    result = run_with_retry(jobs, run, lambda job, outcome: None if outcome.returncode == 0 else "exit 1")
    assert calls == [["good", "flaky", "broken"], ["flaky", "broken"]]
    assert result.failures == {"broken": "exit 1"} and result.attempts == {"good": 1, "flaky": 2, "broken": 2}


def test_the_slurm_path_runs_through_submitits_local_executor(tmp_path):
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934011", "submission_281934066"])
    out = tmp_path / "out"
    result = _batch(export.parent, out, "--executor", "submitit-local", "--problems", "memory_profiling")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = _rows(out)
    assert [row["Submission"] for row in rows] == ["submission_281934011"] * 2 + ["submission_281934066"]
    for row in rows:
        results = json.loads((out / "submissions" / row["Submission"] / "results.json").read_text())
        assert abs(float(row["Total Score"]) - results["score"]) < 1e-3
    assert list((out / "slurm").glob("*_submitted.pkl")), "the jobs went through submitit"


def test_dry_run_prints_the_exact_sbatch_parameters(tmp_path):
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934022", "submission_281934066"])
    result = _batch(export, tmp_path / "out", "--executor", "slurm", "--dry-run", "--partition", "gpu",
                    "--account", "cs336", "--time", "45", "--slurm-extra", "constraint=h100")
    assert result.returncode == 0, result.stderr[-2000:]
    for line in ("#SBATCH --array=0-1%2", "#SBATCH --gpus-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --account=cs336", "#SBATCH --time=45", "#SBATCH --constraint=h100"):
        assert line in result.stdout, (line, result.stdout)
    assert "autograder grade" in result.stdout and "--require-gpu" in result.stdout
    assert not (tmp_path / "out" / "submissions").exists(), "a dry run grades nothing"


def test_two_gpus_a_job_for_part_2(tmp_path):
    """--gpus-per-job 2: local slots are pairs of GPUs, Slurm asks for two; too few GPUs is a clear error."""
    from autograder.batch.executors import SlotError, local_devices

    assert local_devices("4", 2, per_job=2) == ["0,1", "2,3"]
    assert local_devices("0,2,3", 2, per_job=2) == ["0,2"]  # the odd one out stays idle
    assert local_devices("3", 2) == ["0", "1", "2"]
    assert local_devices("0", 3, per_job=2) == [None, None, None]  # no GPU: CPU slots, as before
    with pytest.raises(SlotError, match="needs at least 2 GPUs"):
        local_devices("1", 2, per_job=2)
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934022"])
    result = _batch(export, tmp_path / "out", "--executor", "slurm", "--dry-run", "--gpus-per-job", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "#SBATCH --gpus-per-node=2" in result.stdout and "(2 GPUs a job)" in result.stdout, result.stdout
    refused = _batch(export, tmp_path / "out2", "--gpus", "1", "--gpus-per-job", "2")
    assert refused.returncode == 2 and "--gpus-per-job 2 needs at least 2 GPUs" in refused.stderr, refused.stderr


def test_leaderboard_batch_dry_run_lists_one_timing_per_submission(tmp_path):
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934011", "submission_281934022"])
    command = [sys.executable, "-m", "leaderboard", "batch", str(export), "--out", str(tmp_path / "lb"),
               "--executor", "slurm", "--dry-run", "--partition", "gpu"]
    result = subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    runs = [line for line in result.stdout.splitlines() if " -m leaderboard run " in line]
    assert len(runs) == 2 and "--name Ada Lovelace, Charles Babbage" in runs[0]
    assert "#SBATCH --gpus-per-node=1" in result.stdout and "#SBATCH --array=0-1%2" in result.stdout


def test_gpus_per_job_0_asks_slurm_for_cpu_jobs(tmp_path):
    """--gpus-per-job 0 (a CPU partition, as autograder/batch/local_slurm.py makes): no GPU in the
    sbatch script and no --require-gpu in the grades; on this machine's executor it is refused."""
    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934022"])
    result = _batch(export, tmp_path / "out", "--executor", "slurm", "--dry-run", "--gpus-per-job", "0",
                    "--partition", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "#SBATCH --partition=cpu" in result.stdout and "autograder grade" in result.stdout, result.stdout
    assert "--gpus-per-node" not in result.stdout and "--require-gpu" not in result.stdout, result.stdout
    refused = _batch(export, tmp_path / "out2", "--gpus-per-job", "0")
    assert refused.returncode != 0 and "0, CPU jobs, is for --executor slurm" in refused.stderr, refused.stderr
