"""``python -m autograder batch``: a fake Gradescope export of seven submissions (the reference with
two group members, the stubs, two FlashAttention mutants, an attack, a corrupt zip, one without
adapters.py) graded on this CPU with the local executor, two at a time, on two cheap problems, one
of which has GPU-only points: the batch names them and refuses to write scores.csv; then again
with --partial (nothing is regraded; the CSV names the ungraded points); then the Slurm path
through submitit's own local executor, and the sbatch script of --dry-run."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch.executors import Job, Outcome, run_with_retry
from autograder.batch.export import read_export
from autograder.batch.grading import _ungraded_lines
from autograder.manifest import load_manifest
from autograder.selftests.fake_export import SUBMISSIONS, build_export
from autograder.selftests.gradescope_schema import hidden_shown_early, problems_with

KIT = Path(__file__).resolve().parents[2]
PROBLEMS = "memory_profiling,flash_forward_pytorch"
SECRET = "selftest-course-secret"  # a batch grades only with the course secret (--secret or --bundle)


def _batch(export: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out),
               "--secret", SECRET, *flags]
    return subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    root.chmod(0o755)
    export = build_export(root)
    out = root / "out"
    first = _batch(export, out, "--problems", PROBLEMS, "--jobs", "2", "--gpus", "0")
    first_csv = (out / "scores.csv").exists()
    logs = {path: path.stat().st_mtime_ns for path in out.glob("submissions/*/grade.log")}
    second = _batch(export, out, "--problems", PROBLEMS, "--jobs", "2", "--gpus", "0", "--partial")
    first.csv_written = first_csv
    return export, out, first, second, logs


def _rows(out: Path) -> list[dict]:
    with (out / "scores.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_submission_gets_a_valid_results_json(batch):
    export, out, first, _, _ = batch
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    for folder in SUBMISSIONS:
        results = json.loads((out / "submissions" / folder / "results.json").read_text())
        assert problems_with(results) == [], folder
        assert hidden_shown_early(results) == [], folder
        assert (out / "submissions" / folder / "grade.log").stat().st_size > 0
        assert json.loads((out / "submissions" / folder / "batch.json").read_text())["status"] == "done"
    corrupt = json.loads((out / "submissions" / "submission_281934066" / "results.json").read_text())
    assert corrupt["score"] == 0 and "No test was run" in corrupt["output"]
    assert "your zip is corrupt" in corrupt["extra_data"]["no_test_ran"]
    no_adapters = json.loads((out / "submissions" / "submission_281934077" / "results.json").read_text())
    assert "no adapters.py" in no_adapters["extra_data"]["no_test_ran"] and no_adapters["score"] == 0


def test_a_cpu_batch_names_the_ungraded_gpu_points_and_writes_no_final_csv(batch):
    _, out, first, second, _ = batch
    reference = json.loads((out / "submissions" / "submission_281934011" / "results.json").read_text())
    later = reference["extra_data"]["problems"]["memory_profiling"]["gpu_later"]
    assert later > 0, "memory_profiling has GPU-only tests: this check needs a problem with some"
    line = f"§1.3 memory_profiling {later:.2f}"
    assert first.returncode == 3 and not first.csv_written, "a CPU batch must not write a final CSV unasked"
    assert "NOT GRADED" in first.stdout and line in first.stdout and "--partial" in first.stdout, first.stdout
    assert "scores.csv NOT written" in first.stdout
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert line in (out / "summary.md").read_text() and line in second.stdout
    for row in _rows(out):
        results = json.loads((out / "submissions" / row["Submission"] / "results.json").read_text())
        left = 0.0 if row["Status"].startswith("no test ran") else results["extra_data"]["gpu_later_points"]
        assert abs(float(row["Ungraded Points"]) - left) < 1e-3, row  # a no-test row: nothing left to grade
    histogram = (out / "histogram.md").read_text()  # graded work only, and it says the GPU points are missing
    assert "PARTIAL" in histogram and "5 graded submissions" in histogram, histogram


def test_the_ungraded_line_says_how_to_grade_what_this_runner_could_not():
    results = {"extra_data": {"problems": {"fsdp": {"gpu_later": 1.71}}}}
    graded = [(None, results, "graded, but not 1.71 GPU points")]
    on_cpu = _ungraded_lines(graded, load_manifest(), 0)
    on_one_gpu = _ungraded_lines(graded, load_manifest(), 1)
    assert "fsdp 1.71" in on_cpu[0] and "fsdp 1.71" in on_one_gpu[0]
    assert "grade on a GPU machine" in on_cpu[0] and "--gpus-per-job" not in on_cpu[0], on_cpu
    assert "--gpus-per-job 2" in on_one_gpu[0] and "GPU machine" not in on_one_gpu[0], on_one_gpu


def test_submissions_where_no_test_ran_are_listed_apart_with_the_reason(batch):
    _, out, first, _, _ = batch
    summary = (out / "summary.md").read_text()
    assert "no test could run on 2" in summary, summary
    for folder, why in (("submission_281934066", "your zip is corrupt"), ("submission_281934077", "no adapters.py")):
        listed = [line for line in summary.splitlines() if line.startswith(f"- NO TEST RAN {folder}")]
        assert listed and why in listed[0], summary
        assert listed[0] in first.stdout
    statuses = {row["Submission"]: row["Status"] for row in _rows(out)}
    assert statuses["submission_281934066"].startswith("no test ran: your zip is corrupt"), statuses
    assert statuses["submission_281934077"].startswith("no test ran:"), statuses


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
        assert row["Status"].startswith(("graded", "no test ran")), row
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


def test_an_export_can_add_a_fixture_submission(tmp_path):
    """``extra`` (gpu_checks/batch_throughput.py's autotuning submission) adds a folder and its metadata."""
    extra = {"submission_9": ("fairness:autotuned_triton", [("Donald Knuth", "05550109", "knuth@stanford.edu")])}
    export = build_export(tmp_path, as_zip=False, only=["submission_281934022"], extra=extra)
    submissions = read_export(export, tmp_path / "work")
    assert [s.id for s in submissions] == ["submission_281934022", "submission_9"]
    assert submissions[1].students[0].email == "knuth@stanford.edu"
    assert "@triton.autotune" in "".join(p.read_text() for p in (export / "submission_9").rglob("*.py"))


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
    result = _batch(export.parent, out, "--executor", "submitit-local", "--problems", "memory_profiling",
                    "--partial")
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
    assert len(runs) == 2 and "--name 'Ada Lovelace, Charles Babbage'" in runs[0], runs
    argv = shlex.split(runs[0])  # a printed command pastes into a shell as the argv it runs
    assert argv[argv.index("--name") + 1] == "Ada Lovelace, Charles Babbage", argv
    assert "#SBATCH --gpus-per-node=1" in result.stdout and "#SBATCH --array=0-1%2" in result.stdout


def test_leaderboard_batch_times_a_folder_holding_only_a_zip(tmp_path):
    """Gradescope leaves an upload it could not unpack as a zip: the leaderboard reads it as the grader does."""
    import zipfile

    tmp_path.chmod(0o755)
    export = build_export(tmp_path, as_zip=False, only=["submission_281934011", "submission_281934066"])
    folder = export / "submission_281934011"
    with zipfile.ZipFile(tmp_path / "submission.zip", "w") as archive:
        for path in sorted(folder.rglob("*.py")):
            archive.write(path, path.relative_to(folder).as_posix())
    shutil.rmtree(folder)
    folder.mkdir()
    shutil.move(tmp_path / "submission.zip", folder / "submission.zip")
    out = tmp_path / "lb"
    command = [sys.executable, "-m", "leaderboard", "batch", str(export), "--out", str(out), "--cpu", "--gpus", "0",
               "--jobs", "2"]
    result = subprocess.run(command, cwd=KIT, capture_output=True, text=True, timeout=900)
    log = (out / "runs" / "submission_281934011" / "run.log").read_text()
    assert "does not exist" not in log, log[-2000:]
    records = [json.loads(line) for line in (out / "runs" / "submission_281934011" / "records.jsonl").open()]
    assert records and records[0]["accepted"], log[-3000:]
    assert records[0]["submission"].endswith("submission.zip")
    corrupt = (out / "runs" / "submission_281934066" / "run.log").read_text()
    assert "your zip is corrupt" in corrupt and result.returncode == 0, result.stdout[-2000:]
    # the same on every machine: listed apart, not retried (as the grader's batch lists NO TEST RAN)
    assert json.loads((out / "runs" / "submission_281934066" / "batch.json").read_text())["attempts"] == 1
    summary = (out / "summary.md").read_text()
    assert "NOT TIMED submission_281934066" in summary and "your zip is corrupt" in summary, summary


def test_gpus_per_job_0_asks_slurm_for_cpu_jobs(tmp_path):
    """--gpus-per-job 0 (a CPU partition, as autograder/selftests/local_slurm.py makes): no GPU in the
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
