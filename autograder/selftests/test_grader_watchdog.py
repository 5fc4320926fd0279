"""The grader survives crashing, hanging, exiting and cheating code, and still grades the rest.

Runs the real grader on the toy kit (autograder/selftests/toy_kit.py) against a submission
whose functions misbehave on purpose; every other test of the same process must still get
its honest verdict, and results.json must stay valid.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from autograder.selftests.gradescope_schema import problems_with
from autograder.selftests.toy_kit import build_toy_kit
from harness import gpus

pytestmark = pytest.mark.skipif(not hasattr(os, "setresuid"), reason="the grader needs a POSIX system")


@pytest.fixture(scope="module")
def toy_grade():
    root = Path(tempfile.mkdtemp(prefix="toy-kit-"))
    root.chmod(0o755)  # like a real kit: readable by the sandbox user
    try:
        kit, submission, manifest = build_toy_kit(root)
        report = grade(GradeOptions(submission=submission, out=root / "out", kit=kit, manifest=manifest,
                                    quiet=True, jobs=2))
        written = json.loads((root / "out" / "results.json").read_text())
        report.toy_root = root
        yield report, written
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _by_test(results: dict) -> dict[str, dict]:
    return {entry["name"].rsplit("::", 1)[1]: entry for entry in results["tests"]}


def test_results_json_is_valid_and_matches_the_report(toy_grade):
    report, written = toy_grade
    assert problems_with(written) == []
    assert written == report.results
    gpu_only = 0 if gpus.count() else 1  # left out on a CPU runner, graded on a GPU one
    assert len(written["tests"]) == 12 + 4 + 4 - gpu_only


def test_honest_tests_pass_around_crashes(toy_grade):
    tests = _by_test(toy_grade[1])
    for name in ("test_add", "test_still_graded", "test_secret", "test_after_exit", "test_leaves_a_daemon",
                 "test_cannot_read_other_copies"):
        assert tests[name]["status"] == "passed", tests[name]["output"]
        assert tests[name]["score"] == tests[name]["max_score"] > 0


@pytest.mark.parametrize(
    "name, words",
    [
        ("test_segfault", ["SIGSEGV", "segfault"]),  # the message names the signal and the student's frame
        ("test_hang", ["timed out", "in hang"]),
        ("test_skip", ["Skipped", "a submission may not skip tests"]),  # pytest.skip in the executor is an error
        ("test_patch_pytest", ["assert 0 == 1"]),  # pytest is not in the submission's process to patch
        ("test_forge_records", ["malformed reply"]),  # its lines reach only the executor's own reply pipe
        ("test_pytest_exit", ["a submission may not end the session"]),
        ("test_os_exit", ["exited with status 0"]),
        ("test_gamma_one", ["exited with status 3"]),
        ("test_gamma_four", ["exited with status 3"]),  # every crash costs only its own test
        ("test_hog_memory", ["MemoryError", "ran out of memory"]),
    ],
)
def test_misbehaving_tests_score_zero_with_a_reason(toy_grade, name, words):
    entry = _by_test(toy_grade[1])[name]
    assert entry["status"] == "failed" and entry["score"] == 0 and entry["max_score"] > 0
    for word in words:
        assert word in entry["output"], entry["output"]


def test_a_memory_hog_is_told_the_limit_it_hit(toy_grade):
    if gpus.count():
        pytest.skip("no address-space limit where CUDA runs (CUDA reserves far more than it uses)")
    entry = _by_test(toy_grade[1])["test_hog_memory"]
    assert "address-space limit of 8 GiB" in entry["output"], entry["output"]


def test_gpu_tests_are_left_for_a_gpu_grade_on_cpu(toy_grade):
    results = toy_grade[1]
    entries = _by_test(results)
    if gpus.count():
        assert entries["test_needs_gpu"]["status"] == "passed"
        assert results["extra_data"]["gpu_later_points"] == 0
    else:
        assert "test_needs_gpu" not in entries, "a test this runner cannot grade is not a failure"
        assert results["extra_data"]["gpu_later_points"] > 0
        assert results["output"].startswith("This runner has no GPU.")
        assert abs(results["score"] - sum(e["score"] for e in results["tests"])) < 1e-3


def test_a_leftover_daemon_neither_stalls_nor_outlives_the_grade(toy_grade):
    import time

    report, _ = toy_grade
    assert report.seconds < 120, f"the toy grade took {report.seconds:.0f} s: something waited on a leftover process"
    time.sleep(1.0)  # the zygote sweeps orphans twice a second
    marker = str(report.toy_root).encode()
    daemons = [pid for pid in os.listdir("/proc") if pid.isdigit() and _is_toy_daemon(pid, marker)]
    assert not daemons, f"processes the toy submission left behind are still running: {daemons}"


def _is_toy_daemon(pid: str, marker: bytes) -> bool:
    """A live fork of one of this toy grade's processes (``marker`` on its command line), other than
    the zygote, whose parent is this process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read()
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return marker in command and int(fields[1]) != os.getpid() and fields[0] != b"Z"


def test_points_are_shared_by_problem(toy_grade):
    tests, problems = toy_grade[1]["tests"], toy_grade[1]["extra_data"]["problems"]
    for problem, points in (("alpha", 4), ("beta", 6), ("gamma", 2)):
        mine = [entry for entry in tests if f" {problem} [" in entry["name"]]
        later = problems[problem]["gpu_later"]  # GPU-only tests' points, when this runner has no GPU
        assert abs(sum(entry["max_score"] for entry in mine) + later - points) < 1e-3


@pytest.mark.skipif(os.geteuid() != 0, reason="hiding files from student code needs root (the sandbox user)")
def test_hidden_tests_cannot_be_read_by_student_code(toy_grade):
    report, written = toy_grade
    entry = _by_test(written)["test_read_hidden"]
    assert entry["status"] == "failed"
    assert "hidden-beta-expected-value" not in json.dumps(written)
    assert "unreadable" in entry["output"] or "read:" in entry["output"], entry["output"]


def test_the_total_time_limit_fails_what_is_left_and_still_writes_results(tmp_path_factory):
    root = Path(tempfile.mkdtemp(prefix="toy-kit-"))
    root.chmod(0o755)
    try:
        kit, submission, manifest = build_toy_kit(root)
        # Calibrated, not a fixed number of seconds: the total limit is wall-clock time (Gradescope's),
        # so on a busy machine starting the test process alone can take many times longer. First time
        # a grade of test_add alone here, now; the limit is 3 times that, which leaves test_add room
        # to pass and cuts test_hang (60 s of CPU, 240 s on the clock) off long before its own limit.
        alone = grade(GradeOptions(submission=submission, out=root / "alone", kit=kit, manifest=manifest, quiet=True,
                                   tests=["tests/test_alpha.py::test_add"], test_timeout_s=60))
        assert alone.results["tests"][0]["status"] == "passed", alone.results
        total = max(8.0, 3 * alone.seconds)
        tests = ["tests/test_alpha.py::test_add", "tests/test_alpha.py::test_hang", "tests/test_alpha.py::test_still_graded"]
        report = grade(GradeOptions(submission=submission, out=root / "out", kit=kit, manifest=manifest, quiet=True,
                                    tests=tests, test_timeout_s=60, total_timeout_s=total, jobs=1))  # one chain: in order
        written = json.loads((root / "out" / "results.json").read_text())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert problems_with(written) == []
    outputs = {entry["name"].rsplit("::", 1)[1]: entry for entry in written["tests"]}
    assert outputs["test_add"]["status"] == "passed"
    assert "grading time limit" in outputs["test_hang"]["output"]
    assert outputs["test_still_graded"]["status"] == "failed" and "time limit" in outputs["test_still_graded"]["output"]
    assert report.seconds < total + 30, (report.seconds, total)  # the limit, plus stopping and writing results
    assert (f"2 test(s) failed because this grade's time limit of {total:.0f} s ran out (--timeout)"
            in written["output"]), written["output"]


def test_a_test_process_gets_the_machines_gpu_settings_and_the_staffs_autotune_choice_but_nothing_else(monkeypatch):
    """``CS336_AUTOTUNE=full`` in the grader's environment must reach the harness (every test then
    tunes for real, as a grade without the first-config speed-up); the grader's other variables and
    Triton's cache folders must not."""
    from autograder.harness_process import base_env

    monkeypatch.setenv("CS336_AUTOTUNE", "full")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/shared-cache")
    monkeypatch.setenv("GRADER_API_TOKEN", "not for tests")
    env = base_env(2)
    assert env["CS336_AUTOTUNE"] == "full" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "TRITON_CACHE_DIR" not in env and "GRADER_API_TOKEN" not in env
