"""A runner with fewer GPUs than a test needs never costs that test's points; it says so instead.

Staff only. Part 2's NCCL tests need two GPUs (``@pytest.mark.gpu(count=2)``); many course
runners have one. On such a runner those tests are skipped, and the grader, the student's
``python -m tests.score`` and results.json must treat them as "not graded on this runner", as a
CPU runner treats every GPU test, never as failures. A test skipped for another reason still
earns nothing. A CPU machine cannot have one GPU, so this checks the pieces: the marker, the
verdict, the scorer and results.json, on made-up outcomes.

It also checks the one GPU query every count comes from (harness/gpus.py) against made-up
answers: a fake ``nvidia-smi`` for the listing the batch and the grader read, and a fake
interpreter for the grader's probe, which must leave torch out of the process that asks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import chains as chains_module
from autograder.batch.executors import local_devices
from autograder.manifest import load_manifest
from autograder.results import results_json
from autograder.scoring import GradedTest
from autograder.watchdog import Verdict, _outcome
from harness import gpus
from harness.gpu_marker import SKIP_REASON, gpus_needed, skip_reason
from tests.score import Recorder

NODE = "tests/test_fsdp.py::test_fsdp_memory_on_two_gpus"
KIT = Path(__file__).resolve().parents[2]


def _skipped(reason: str) -> dict:
    return {"nodeid": NODE, "outcome": "skipped", "message": reason, "duration": 0.0}


@pytest.mark.parametrize(("present", "needed"), [(0, 1), (0, 2), (1, 2)])
def test_too_few_gpus_is_not_graded(present, needed):
    verdict = _outcome(_skipped(skip_reason(needed, present)), needed, present)
    assert verdict.status == "not_graded", verdict
    assert (f"needs {needed} CUDA GPUs, and this grader has {present}" in verdict.message if present
            else "this grader has none" in verdict.message)


@pytest.mark.parametrize(("present", "needed"), [(1, 1), (2, 2), (1, 0), (0, 0)])
def test_any_other_skip_earns_nothing(present, needed):
    verdict = _outcome(_skipped("skipped by the submission"), needed, present)
    assert verdict.status == "failed" and "earns no points" in verdict.message


def test_skip_reasons_say_how_many_gpus():
    assert skip_reason(1, 0) == f"{SKIP_REASON} (none found on this machine)"
    assert skip_reason(2, 1) == f"{SKIP_REASON} per process: 2 GPUs (found 1 on this machine)"


class _Item:
    """A stand-in for a pytest item: just ``get_closest_marker``."""

    def __init__(self, marker=None):
        self.marker = marker

    def get_closest_marker(self, name):
        return self.marker.mark if self.marker is not None and name == "gpu" else None


def test_the_marker_counts():
    assert gpus_needed(_Item()) == 0
    assert gpus_needed(_Item(pytest.mark.gpu)) == 1
    assert gpus_needed(_Item(pytest.mark.gpu(count=2))) == 2


def test_the_students_scorer_does_not_fail_a_two_gpu_test_on_one_gpu():
    class Report:
        def __init__(self, when, outcome):
            self.nodeid, self.when = NODE, when
            self.failed, self.skipped, self.passed = outcome == "failed", outcome == "skipped", outcome == "passed"

    for present, expected in ((1, "not_graded"), (2, "failed")):
        recorder = Recorder(gpus=present)
        recorder.gpu = {NODE: 2}
        recorder.pytest_runtest_logreport(Report("setup", "skipped"))
        assert [o.status for o in recorder.outcomes()] == [expected]


def test_results_json_names_the_gpu_count_and_leaves_the_test_out():
    manifest = load_manifest()
    problem = manifest.by_name["fsdp"]
    test = GradedTest(problem, "visible", NODE, Verdict(NODE, "not_graded", "not graded on this runner", gpu=True),
                      max_score=1.0)
    results = results_json([test], manifest, execution_time=1.0, output="x", gpus_present=1)
    assert results["tests"] == [] and results["score"] == 0
    assert results["output"].startswith("This runner has 1 GPU, fewer than some tests need")
    assert results["extra_data"]["gpu_later_points"] == 1.0
    no_gpu = results_json([test], manifest, execution_time=1.0, output="x", gpus_present=0)
    assert no_gpu["output"].startswith("This runner has no GPU.")


def _fake_command(folder: Path, name: str, output: str, status: int = 0) -> Path:
    """An executable ``folder/name`` that prints ``output`` and exits with ``status``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {status}\n")
    path.chmod(0o755)
    return path


SMI_THREE = "0, NVIDIA H200, 143771\n1, NVIDIA H200, 143771\n2, NVIDIA H100 80GB HBM3, 81559"


def test_listed_reads_every_gpu_nvidia_smi_lists(tmp_path, monkeypatch):
    _fake_command(tmp_path / "bin", "nvidia-smi", SMI_THREE)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # nvidia-smi lists the machine's GPUs, not this process's
    assert gpus.listed() == [gpus.ListedGPU(0, "NVIDIA H200", 143771.0), gpus.ListedGPU(1, "NVIDIA H200", 143771.0),
                             gpus.ListedGPU(2, "NVIDIA H100 80GB HBM3", 81559.0)]
    assert local_devices("auto", jobs=4) == ["0", "1", "2"]  # one batch slot per listed GPU
    assert local_devices("auto", jobs=4, per_job=2) == ["0,1"]
    assert chains_module.gpu_memory_gib() == pytest.approx(81559 / 1024)  # the smallest GPU sizes the grade


def test_listed_is_empty_when_nvidia_smi_fails_or_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpus.listed() == [] and local_devices("auto", jobs=3) == [None, None, None]
    assert chains_module.gpu_memory_gib() is None
    _fake_command(tmp_path / "bin", "nvidia-smi", "NVIDIA-SMI has failed", status=9)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert gpus.listed() == [] and local_devices("auto", jobs=2) == [None, None]


def test_a_gpu_whose_memory_nvidia_smi_cannot_say_leaves_the_size_unknown(tmp_path, monkeypatch):
    _fake_command(tmp_path / "bin", "nvidia-smi", "0, NVIDIA H200, 143771\n1, NVIDIA H200, [N/A]")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert [gpu.memory_mib for gpu in gpus.listed()] == [143771.0, None]
    assert chains_module.gpu_memory_gib() is None  # the grade then assumes the smallest default


@pytest.mark.parametrize(("output", "status", "expected"), [("2", 0, 2), ("0", 0, 0), ("Traceback", 1, 0),
                                                            ("not a number", 0, 0)])
def test_the_probe_reads_what_a_fresh_interpreter_answers(tmp_path, output, status, expected):
    fake = _fake_command(tmp_path, "python", output, status)
    assert gpus.probe_count(str(fake)) == expected


def test_the_probe_agrees_with_this_process_and_leaves_torch_out_of_the_caller():
    """The grader asks through the probe so that it never imports torch or initialises CUDA itself."""
    script = "import sys; from harness import gpus; n = gpus.probe_count(); print(n, 'torch' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", script], cwd=KIT, capture_output=True, text=True, timeout=300)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.split() == [str(gpus.count()), "False"], answer.stdout
