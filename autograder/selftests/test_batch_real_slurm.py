"""``python -m autograder batch --executor slurm`` on a real Slurm: a one-node cluster of Debian's
slurm-wlm started on this machine (autograder/selftests/local_slurm.py), real ``sbatch`` job arrays
through submitit, job states read by submitit's ``sacct`` from slurmdbd.

A fake export of three submissions (the reference, the stubs, a corrupt zip), graded on one cheap
problem in CPU jobs of one CPU each. While the first batch runs, the stubs' array task is
cancelled with ``scancel``, and so is the retry the batch then submits: the batch must read both
cancellations from Slurm, grade the other two, and report the stubs failed. Resumed, the batch
grades the stubs alone. Cost on a 2-core machine (2026-12-02): 136 s in all; the cluster starts in
about 10 s, the first batch took 81 s and the resumed one 36 s (each grade takes 1 to 20 s) while
the batch looked at its jobs every 15 s, Slurm's default. It looks every 2 s here (``--poll-s``):
64 s in all (2026-12-02, load average about 2), the first batch 44 s and the resumed one 10 s.

Skipped, with the reason, where Slurm cannot run (not root, or slurm-wlm not installed: setup.sh
installs it as root where apt-get exists); under CI (CI=true) on such a machine a missing
install fails instead, since setup.sh should have made it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.selftests.local_slurm import LocalSlurm, missing
from autograder.selftests.fake_export import build_export
from autograder.selftests.gradescope_schema import problems_with

KIT = Path(__file__).resolve().parents[2]
REFERENCE, STUBS, CORRUPT = "submission_281934011", "submission_281934022", "submission_281934066"
ORDER = [REFERENCE, STUBS, CORRUPT]  # the export's metadata order: the array's task order
CANCELLED_TASK = ORDER.index(STUBS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = missing()
    if why:
        installable = os.geteuid() == 0 and shutil.which("apt-get") is not None
        if installable and os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"{why}: on CI, bash setup.sh must have installed it (see its [setup] slurm line)")
        pytest.skip(why)
    root = tmp_path_factory.mktemp("real_slurm")
    root.chmod(0o755)
    with LocalSlurm(root / "cluster") as running:
        yield running


def _batch_argv(export: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out), "--executor", "slurm",
            "--partition", "cpu", "--gpus-per-job", "0", "--cpus", "1", "--mem-gb", "2", "--time", "10",
            "--problems", "memory_profiling", "--partial",  # CPU jobs: the GPU tests are not graded
            "--poll-s", "2",
            "--secret", "selftest-course-secret"]  # the jobs are looked at every 2 s, not Slurm's default 15: same states, less waiting


def _queue(cluster: LocalSlurm) -> dict[str, str]:
    """Job id (array tasks one a line, ``12_1``) -> state, from squeue."""
    answer = cluster.run("squeue", "-h", "-r", "-o", "%i %T")
    assert answer.returncode == 0, answer.stderr
    return dict(line.split() for line in answer.stdout.splitlines() if line.strip())


def _wait_for(cluster: LocalSlurm, batch: subprocess.Popen, found, what: str, limit_s: float = 300.0) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        hit = found(_queue(cluster))
        if hit:
            return hit
        if batch.poll() is not None:
            pytest.fail(f"the batch ended before {what}:\n{batch.stdout.read()[-4000:]}")
        time.sleep(0.2)
    batch.kill()
    pytest.fail(f"no {what} within {limit_s:.0f} s:\n{batch.communicate()[0][-4000:]}")


def _accounting(cluster: LocalSlurm) -> dict[str, str]:
    """Job id -> state of every job and array task (not steps), from sacct."""
    answer = cluster.run("sacct", "-a", "-X", "-n", "-S", "2020-01-01", "--parsable2", "-o", "JobID,State")
    assert answer.returncode == 0, answer.stderr
    return {job: state for job, state in (line.split("|")[:2] for line in answer.stdout.splitlines() if line)}


def _record(out: Path, folder: str) -> dict:
    """The batch's record of one submission (batch.json), or {} when it wrote none."""
    try:
        return json.loads((out / "submissions" / folder / "batch.json").read_text())
    except (OSError, ValueError):
        return {}


def _statuses(out: Path) -> dict[str, str]:
    try:
        with (out / "scores.csv").open(newline="") as handle:
            return {row["Submission"]: row["Status"] for row in csv.DictReader(handle)}
    except OSError:
        return {}


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


@pytest.fixture(scope="module")
def cancelled_then_resumed(cluster, tmp_path_factory):
    """The first batch (with the stubs' task and its retry cancelled), then the resumed batch."""
    root = tmp_path_factory.mktemp("real_slurm_export")
    root.chmod(0o755)
    export = build_export(root, as_zip=False, only=ORDER)
    out = root / "out"
    argv = _batch_argv(export, out)
    started = time.monotonic()
    batch = subprocess.Popen(argv, cwd=KIT, env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        task = _wait_for(cluster, batch, lambda queue: next(
            (job for job, state in queue.items() if job.endswith(f"_{CANCELLED_TASK}") and state == "RUNNING"), None),
            f"running array task {CANCELLED_TASK} (the stubs)")
        assert cluster.run("scancel", task).returncode == 0
        array = task.split("_")[0]
        retry = _wait_for(cluster, batch, lambda queue: next(
            (job for job in queue if job.split("_")[0] not in ("", array)), None), "retry job for the stubs")
        assert cluster.run("scancel", retry).returncode == 0  # one job, not an array: submitit sends one alone
        first_output = batch.communicate(timeout=600)[0]
    finally:
        if batch.poll() is None:
            batch.kill()
    first_s = time.monotonic() - started
    first = {"returncode": batch.returncode, "output": first_output, "array": array, "retry": retry,
             "accounting": _accounting(cluster), "records": {folder: _record(out, folder) for folder in ORDER},
             "statuses": _statuses(out),
             "logs": {folder: _mtime(out / "submissions" / folder / "grade.log") for folder in (REFERENCE, CORRUPT)}}
    started = time.monotonic()
    second = subprocess.run(argv, cwd=KIT, env=cluster.env(), capture_output=True, text=True, timeout=600)
    print(f"real Slurm: first batch {first_s:.0f} s, resumed batch {time.monotonic() - started:.0f} s")
    return out, first, second, _accounting(cluster)


def test_real_slurm_runs_the_export_as_one_sbatch_job_array(cancelled_then_resumed):
    out, first, _, _ = cancelled_then_resumed
    array, states = first["array"], first["accounting"]
    assert [states.get(f"{array}_{index}", "").split()[0] for index in range(len(ORDER))] == \
        ["COMPLETED", "CANCELLED", "COMPLETED"], (states, first["output"][-3000:])
    for folder in (REFERENCE, CORRUPT):
        record = first["records"][folder]
        assert record.get("status") == "done" and record.get("attempts") == 1, (record, first["output"][-3000:])
        assert record["host"], "the grade ran in a Slurm job, which reports its node"
        results = json.loads((out / "submissions" / folder / "results.json").read_text())
        assert problems_with(results) == [], folder
    assert first["statuses"][REFERENCE].startswith("graded"), first["statuses"]  # "graded, but not ... GPU points"
    assert first["statuses"][CORRUPT].startswith("no test ran"), first["statuses"]
    assert list((out / "slurm").glob(f"{array}_*_submitted.pkl")), "the jobs went through submitit's sbatch"


def test_real_slurm_cancelled_job_is_read_from_slurm_retried_once_and_reported(cancelled_then_resumed):
    _, first, _, _ = cancelled_then_resumed
    assert first["returncode"] == 1, first["output"][-3000:]
    assert first["accounting"].get(first["retry"], "").startswith("CANCELLED"), first["accounting"]
    record = first["records"][STUBS]
    assert record.get("status") == "failed" and record.get("attempts") == 2, (record, first["output"][-3000:])
    assert f"job {first['retry']} ended CANCELLED" in record["failure"], \
        f"the failure names the state Slurm reported: {record['failure']!r}"
    assert f"FAILED {STUBS} (Grace Hopper)" in first["output"], first["output"][-3000:]
    assert first["statuses"][STUBS].startswith("failed"), first["statuses"]


def test_real_slurm_resumed_batch_regrades_only_the_cancelled_submission(cancelled_then_resumed):
    out, first, second, accounting = cancelled_then_resumed
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "2 already graded" in second.stdout and "1 to grade" in second.stdout, second.stdout[-3000:]
    new_jobs = {job for job in accounting if job.split("_")[0] not in (first["array"], first["retry"].split("_")[0])}
    assert len(new_jobs) == 1 and accounting[new_jobs.pop()] == "COMPLETED", accounting
    record = _record(out, STUBS)
    assert record.get("status") == "done" and record.get("attempts") == 1, (record, second.stdout[-3000:])
    results = json.loads((out / "submissions" / STUBS / "results.json").read_text())
    assert problems_with(results) == [] and results["score"] == 0, results.get("output", "")[:2000]
    statuses = _statuses(out)
    assert statuses[STUBS].startswith("graded") and statuses[REFERENCE].startswith("graded"), statuses
    assert statuses[CORRUPT].startswith("no test ran"), statuses
    for folder, mtime in first["logs"].items():
        assert mtime is not None and _mtime(out / "submissions" / folder / "grade.log") == mtime, f"{folder} was regraded"
