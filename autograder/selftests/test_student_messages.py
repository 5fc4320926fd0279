"""What a student reads when a test fails: the problem's own words, the test's frames, a rerun line.

One mutant of each FlashAttention problem and one of part 2, and the reference with a forward
that raises (the submission's own error, with its own traceback), each zipped as
make_submission.sh zips it and graded on its visible tests (what a student sees at once),
without ``-v``. Every failure the student sees must have:

- no autotune wording ("with your kernels as they are ...") when no autotuner with two or more
  configs ran (these mutants have none: the note belongs to Triton tests that autotune);
- no kit plumbing in its traceback (harness/stub_failures.py, harness/autotune_configs.py,
  harness/assertions.py's raise, the executor's client and its server), only the test's own
  frames and the submission's;
- each rerun command on a line of its own;
- no absolute path of the grading machine;

and the console shows no line over 300 characters, nor the staff's timing lines (those go to
``--out``/grade.log). Then, without a grade: the "refused CPU tensors" advice is given for real
refusals only, never for a crash of the submission's process or an error that merely mentions
``device`` in its traceback, nor for an error of the kit's own code; and an error the submission
raises comes back with its own frames (``cs336_systems/...``), without the executor's or a path.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fixtures import materialize, mutants

KIT = Path(__file__).resolve().parents[2]
CASES = [  # (mutant, the problem it breaks)
    ("scale_applied_twice", "flash_forward_pytorch"),
    ("accumulator_not_rescaled", "flash_forward_triton"),
    ("delta_from_dO_only", "flash_backward"),
    ("bucket_boundary_off_by_one", "ddp_bucketed"),
    ("forward_raises", "flash_forward_pytorch"),  # not a catalog mutant: the reference, whose forward raises
]
KIT_PLUMBING = ("executor/", "cs336_executor", "harness/client.py", "harness/proxies.py", "harness/process.py",
                "harness/replay.py", "harness/autograd_bridge.py", "stub_failures.py", "autotune_configs.py", "in assert_close\n")
RAISED = "torch.zeros(Q.shape, Q.dtype, 3)"  # the line forward_raises adds: a TypeError, as real submissions raised
AUTOTUNE_WORDING = re.compile(r"with your kernels as they are|of your autotuned kernels|@triton\.autotune with")
ABSOLUTE_PATH = re.compile(r"(?:^|[\s\"'(\[=])(/[\w.-]+){2,}", re.MULTILINE)
RERUN = ".venv/bin/python -m tests.checks.flash_repro"


def _zip(submission: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for file in sorted(submission.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                archive.write(file, file.relative_to(submission).as_posix())
    return path


def _forward_raises(folder: Path) -> Path:
    """The reference, whose PyTorch FlashAttention forward starts with a line that raises a TypeError."""
    import shutil

    shutil.copytree(KIT / "reference" / "cs336_systems", folder / "cs336_systems", symlinks=False)
    shutil.copy(KIT / "reference" / "adapters.py", folder / "adapters.py")
    source = folder / "cs336_systems" / "flash_attention_pytorch.py"
    text = source.read_text()
    body = re.search(r"\n    def forward\(.*?\):\n(\s+\"\"\"[\s\S]*?\"\"\"\n)?", text)
    assert body, "the reference's PyTorch Function has no forward to break"
    source.write_text(text[:body.end()] + f"        {RAISED}\n" + text[body.end():])
    return folder


@pytest.fixture(scope="module", params=CASES, ids=[case[0] for case in CASES])
def graded(request, tmp_path_factory):
    name, problem = request.param
    root = tmp_path_factory.mktemp(name)
    root.chmod(0o755)
    folder = _forward_raises(root / "submission") if name == "forward_raises" else materialize(mutants.get(name), root / "submission")
    submission = _zip(folder, root / "submission.zip")
    out = root / "out"
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", str(submission), "--problems", problem,
                             "--suites", "visible", "--out", str(out)], cwd=KIT, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    failures = [test for test in results["tests"] if test["status"] == "failed"]
    assert failures, f"{name} failed no visible test of {problem}: pick another mutant"
    return result, out, failures


def test_no_failure_carries_autotune_wording_without_autotune_configs(graded):
    _, _, failures = graded
    for test in failures:
        assert not AUTOTUNE_WORDING.search(test["output"]), test["output"][:2000]


def test_no_failure_shows_kit_plumbing_frames(graded):
    _, _, failures = graded
    for test in failures:
        assert not any(frame in test["output"] for frame in KIT_PLUMBING), test["output"][:4000]
        assert re.search(r"^tests/test_\w+\.py:\d+: in test_", test["output"], re.MULTILINE), test["output"][:4000]
        if RAISED in test["output"]:  # the submission's own frame, where its code raised
            assert re.search(r'File "cs336_systems/flash_attention_pytorch\.py", line \d+, in forward', test["output"]), \
                test["output"][:4000]


def test_every_rerun_command_stands_on_its_own_line(graded):
    _, _, failures = graded
    for test in failures:
        for line in test["output"].splitlines():
            if RERUN in line:
                assert re.match(r"^(E\s+)?\s*rerun: (TRITON_INTERPRET=1 )?\.venv/bin/python", line), line


def test_no_failure_shows_an_absolute_path(graded):
    _, _, failures = graded
    for test in failures:
        assert not ABSOLUTE_PATH.search(test["output"]), ABSOLUTE_PATH.search(test["output"]).group(0)


def test_the_console_has_no_long_line_and_no_staff_timings(graded):
    result, out, _ = graded
    long = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if len(line) > 300]
    assert not long, long[0][:500]
    assert "chain times" not in result.stdout and "test time per file" not in result.stdout
    log = (out / "grade.log").read_text()
    assert "grade: chain times: " in log and "grade: test time per file: " in log


# -- the "refused CPU tensors" advice ---------------------------------------------------------


def _stand_in(kind: str, message: str, trace: str):
    from harness.client import _stand_in as make

    return make({"base": kind, "type": f"builtins.{kind}", "message": message, "traceback": trace})


_TYPE_ERROR_TRACE = '''Traceback (most recent call last):
  File "/w/submission/cs336_systems/flash_attention_triton.py", line 42, in forward
    O = torch.zeros(Q.shape, Q.dtype, device=Q.device)
TypeError: zeros() takes 1 positional argument but 2 were given
'''


def _reported(error: BaseException) -> BaseException:
    from harness.flash_cases import FlashCase, reporting

    case = FlashCase(batch=1, n_queries=3, n_keys=3, d=16)
    with pytest.raises(BaseException) as caught:
        with reporting(case, "triton", "forward", "FlashAttentionTriton.apply"):
            raise error
    return caught.value


def test_an_error_that_only_mentions_device_in_its_traceback_is_not_a_refusal():
    error = _reported(_stand_in("TypeError", "zeros() takes 1 positional argument but 2 were given",
                                _TYPE_ERROR_TRACE))
    assert "refused CPU tensors" not in str(error) and isinstance(error, TypeError), str(error)


def test_a_crash_of_the_submissions_process_is_not_a_refusal():
    from harness.flash_cases import explain_device_refusal
    from harness.process import ExecutorFailure

    explain_device_refusal(ExecutorFailure("the executor died (cuda device lost)"), "cpu",
                           "FlashAttentionTriton.apply", triton=True)  # returns: no advice


def test_a_real_refusal_gets_the_advice():
    error = _reported(_stand_in("RuntimeError", "Pointer argument cannot be accessed from Triton (cpu tensor?)", ""))
    assert "refused CPU tensors" in str(error), str(error)


def test_an_error_of_the_kits_own_code_is_not_a_refusal():
    """An error raised in the kit's harness/ (the harness's own code, here one that names CUDA) is
    not the submission refusing CPU tensors: no advice to the student about their asserts."""
    from harness.flash_cases import explain_device_refusal

    kit_file = str(KIT / "harness" / "flash_cases.py")  # where the harness's code lives
    try:
        exec(compile("raise RuntimeError('CUDA error: out of memory in the harness')", kit_file, "exec"))
    except RuntimeError as error:
        explain_device_refusal(error, "cpu", "FlashAttentionTriton.apply", triton=True)  # returns: no advice


# -- the submission's own traceback -----------------------------------------------------------


def test_an_error_of_the_submission_shows_its_frames_without_the_executors_or_a_path(tmp_path):
    """A submission whose forward raises (a TypeError from torch.zeros, as real submissions did):
    the traceback that comes back from its process shows the submission's own frame, relative to
    the submission (``cs336_systems/...``), and neither the executor's plumbing (its server.py)
    nor any absolute path of the grading machine (the executor's copy, Python's packages)."""
    import torch

    from harness.flash_cases import FlashCase, check_forward
    from harness.client import Executor
    from harness.process import ExecutorSettings
    from harness.proxies import RemoteAdapters

    submission = _forward_raises(tmp_path / "submission")
    executor = Executor(ExecutorSettings(submission=submission, workdir=tmp_path / "work", test_timeout_s=120.0))
    case = FlashCase(batch=1, n_queries=8, n_keys=8, d=16, dtype=torch.float32, is_causal=False, device="cpu")
    try:
        executor.begin_test()
        function = RemoteAdapters(executor).get_flashattention_autograd_function_pytorch()
        with pytest.raises(TypeError) as caught:
            check_forward(function, case, "pytorch")
    finally:
        executor.stop()
    shown = "\n".join(getattr(caught.value, "__notes__", ()))
    assert re.search(r'File "cs336_systems/flash_attention_pytorch\.py", line \d+, in forward', shown), shown
    assert RAISED in shown, shown
    assert "server.py" not in shown and "cs336_executor" not in shown, shown
    assert not ABSOLUTE_PATH.search(shown), ABSOLUTE_PATH.search(shown).group(0)



def test_a_probes_report_of_the_submissions_error_has_its_frames_only(tmp_path, monkeypatch):
    """The probes that call the submission in processes of their own (benchmarking, memory
    profiling, the parallel ranks) report its errors as ``student_traceback`` writes them: the
    submission's frame relative to the folder its ``adapters`` came from, Python's packages
    relative to their folder, the kit's frames (here the probe's ``caught``) left out."""
    import importlib.util
    import types

    import torch

    from executor.probes.benchmarking_script import caught

    (tmp_path / "cs336_systems").mkdir()
    path = tmp_path / "cs336_systems" / "step.py"
    path.write_text("import torch\n\n\ndef step(Q):\n    return torch.zeros(Q.shape, Q.dtype, 3)\n")
    spec = importlib.util.spec_from_file_location("cs336_messages_step", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    adapters = types.ModuleType("adapters")
    adapters.__file__ = str(tmp_path / "adapters.py")
    monkeypatch.setitem(sys.modules, "adapters", adapters)  # as the executor and each rank have imported it

    report = caught(module.step, torch.zeros(2))["error"]["traceback"]
    assert 'File "cs336_systems/step.py", line 5, in step' in report, report
    assert "torch.zeros(Q.shape, Q.dtype, 3)" in report and "TypeError: zeros()" in report, report
    assert "benchmarking_script.py" not in report and "in caught" not in report, report
    assert not ABSOLUTE_PATH.search(report), ABSOLUTE_PATH.search(report).group(0)
