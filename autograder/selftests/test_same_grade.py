"""Same submission, same grade: the examples, the limits, the isolation and the credit do not vary.

Read by staff changing how examples are drawn (harness/example_seeds.py), how time is charged
(harness/cpu_clock.py, autograder/watchdog.py), how many chains a grade runs
(autograder/cpus.py ``usable_cpus``), what survives from one test to the next
(harness/client.py, process.py), what a failure says (harness/flash_cases.py, autograder/redaction.py) and
what a bad-input test credits (tests/checks/flash_bad_inputs.py). Every check runs on a CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.mutants import BASE_DIR
from harness.example_seeds import PUBLIC_SECRET, example_seed, seed_hypothesis_test

KIT = Path(__file__).resolve().parents[2]


def _pytest(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    environment = {**os.environ, "PYTHONPATH": str(KIT), **(env or {})}
    environment.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env=environment, capture_output=True, text=True, timeout=timeout)


# -- deterministic examples ---------------------------------------------------------------


def test_a_seed_depends_on_the_secret_and_the_test_only():
    node = "tests/test_flash_backward.py::test_flash_backward_triton_any_shape"
    assert example_seed(node, "term-secret") == example_seed(node, "term-secret")
    assert example_seed(node, "term-secret") != example_seed(node, "another-secret")
    assert example_seed(node, "term-secret") != example_seed(node + "x", "term-secret")
    if not os.environ.get("CS336_HIDDEN_SEED"):
        assert example_seed(node) == example_seed(node, PUBLIC_SECRET), "a student's run: the public word"


def test_a_seeded_hypothesis_test_draws_the_same_examples_every_time():
    import torch
    from hypothesis import given

    from harness.flash_cases import flash_case_strategy

    def draws(seed_value: int) -> list:
        seen = []

        @given(flash_case_strategy(dtypes=(torch.float32,), max_batch=2, max_tokens=80, device="cpu"))
        def fuzz(case):
            seen.append(case)

        assert seed_hypothesis_test(fuzz, seed_value)
        assert fuzz._hypothesis_internal_use_settings.database is None  # no replay of other runs' failures
        fuzz()
        return seen

    first, again, other = draws(123), draws(123), draws(456)
    assert first and first == again
    assert first != other


_FUZZ_FILE = '''
from hypothesis import given, strategies as st

@given(st.integers(0, 10**9))
def test_draws(value):
    with open(__import__("os").environ["DRAWS"], "a") as handle:
        handle.write(f"{value}\\n")
'''


def test_the_kit_plugin_gives_every_run_of_a_test_the_same_examples(tmp_path):
    """Two runs with the course's secret draw the same values; another secret draws others."""
    (tmp_path / "test_fuzz.py").write_text(_FUZZ_FILE)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("harness.example_seeds",)\n')

    def run(secret: str, name: str) -> list[str]:
        draws = tmp_path / name
        result = _pytest(["-q", "test_fuzz.py"], tmp_path, {"CS336_HIDDEN_SEED": secret, "DRAWS": str(draws)})
        assert result.returncode == 0, result.stdout + result.stderr
        return draws.read_text().split()

    first, again, other = run("term-secret-1", "a"), run("term-secret-1", "b"), run("term-secret-2", "c")
    assert len(first) > 3 and first == again
    assert first != other


# -- a timeout names its example -----------------------------------------------------------


_TIMEOUT_FILE = '''
import os
from hypothesis import given, strategies as st
from harness.process import ExecutorFailure

@given(st.integers(0, 10**6))
def test_times_out(value):
    log = os.environ["SEEN"]
    if os.path.exists(log):  # the process is gone: every later example fails at once
        raise ExecutorFailure("not run: timed out (earlier in this test)")
    if value > 1000:
        open(log, "w").write(str(value))
        raise ExecutorFailure(f"timed out: still running after 120 s while running on value={value}")
'''


def test_a_timeout_in_a_fuzz_test_names_the_example_that_timed_out(tmp_path):
    (tmp_path / "test_timeout.py").write_text(_TIMEOUT_FILE)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("harness.stub_failures", "harness.example_seeds")\n')
    seen = tmp_path / "seen"
    result = _pytest(["-q", "test_timeout.py"], tmp_path, {"SEEN": str(seen)})
    assert result.returncode == 1, result.stdout + result.stderr
    value = seen.read_text()
    assert f"value={value}" in result.stdout, result.stdout
    assert "not run: timed out" not in result.stdout.split("short test summary")[-1], result.stdout


# -- limits that do not depend on load ----------------------------------------------------


def test_usable_cpus_follow_the_cgroup_quota(tmp_path, monkeypatch):
    from autograder.cpus import cgroup_cpu_limit

    (tmp_path / "sys" / "job").mkdir(parents=True)
    (tmp_path / "sys" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "sys" / "job" / "cpu.max").write_text("150000 100000\n")
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/job\n")
    assert cgroup_cpu_limit(tmp_path / "sys", cgroup.read_text()) == 1.5
    (tmp_path / "sys" / "job" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "sys", cgroup.read_text()) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "slurm").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "slurm" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu,cpuacct" / "slurm" / "cpu.cfs_period_us").write_text("100000\n")
    cgroup.write_text("4:cpu,cpuacct:/slurm\n")
    assert cgroup_cpu_limit(v1, cgroup.read_text()) == 2.0

    from autograder import cpus

    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda *args: 1.5)
    assert cpus.usable_cpus() == 2
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda *args: None)
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: 64)
    assert cpus.usable_cpus() == 8, "the affinity mask, not the host's CPU count"


def test_a_budget_charges_cpu_time_not_waiting():
    """A process that waits is charged almost nothing; one that computes is charged what it uses;
    a wait past the wall-clock backstop ends the budget."""
    from harness.cpu_clock import Budget, tree_cpu_seconds

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 2.0\n"
                                "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        time.sleep(0.5)
        waiting = Budget(1.0, 3.0, lambda: sleeper.pid)
        working = Budget(100.0, 300.0, lambda: spinner.pid)
        assert tree_cpu_seconds(sleeper.pid) is not None
        time.sleep(1.5)
        assert waiting.cpu() < 0.3 and not waiting.expired(), "waiting is not charged"
        time.sleep(1.8)
        assert waiting.expired(), "the wall-clock backstop ends a test that waits on nothing"
        end = time.monotonic() + 20
        while working.cpu() < 1.0 and time.monotonic() < end:
            time.sleep(0.2)
        assert 1.0 <= working.charged() <= working.wall() + 0.05
    finally:
        for process in (sleeper, spinner):
            process.kill()
            process.wait()


def test_a_budget_charges_a_busy_machine_nothing_extra():
    """Under load the wall clock stretches, CPU time does not: a child doing 1 s of work while 3
    other busy processes share the CPUs is charged about 1 s, however long it took."""
    from harness.cpu_clock import Budget

    work = ("import time\nend = time.process_time() + 1.0\n"
            "while time.process_time() < end: pass\n")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        child = subprocess.Popen([sys.executable, "-c", work + "time.sleep(30)"])
        budget = Budget(100.0, 400.0, lambda: child.pid)
        end = time.monotonic() + 60
        while (budget.cpu() or 0.0) < 1.0 and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(0.5)
        assert budget.charged() < 1.6, (budget.charged(), budget.wall())
        child.kill()
        child.wait()
    finally:
        for process in spinners:
            process.kill()
            process.wait()


# -- isolation between tests ---------------------------------------------------------------


def _executor(tmp_path):
    from harness.client import Executor
    from harness.process import ExecutorSettings

    return Executor(ExecutorSettings(submission=tmp_path, workdir=tmp_path / "work", test_timeout_s=10.0))


def test_a_triton_or_cuda_failure_gets_the_next_test_a_fresh_executor(tmp_path, monkeypatch):
    from harness.client import breaks_the_process

    assert breaks_the_process({"type": "triton.runtime.interpreter.InterpreterError", "traceback": ""})
    assert breaks_the_process({"type": "builtins.TypeError", "traceback":
                               'File "/x/site-packages/triton/runtime/interpreter.py", line 3, in __call__'})
    assert breaks_the_process({"type": "torch.AcceleratorError", "traceback": "", "message": "an illegal access"})
    assert breaks_the_process({"type": "builtins.RuntimeError", "traceback": "",
                               "message": "CUDA error: an illegal memory access was encountered"})
    assert not breaks_the_process({"type": "builtins.ValueError", "message": "Q must be 3-D",
                                   "traceback": 'File "/w/submission/cs336_systems/flash_attention_triton.py", line 9'})
    executor = _executor(tmp_path)
    started = []
    monkeypatch.setattr(executor, "start", lambda: started.append(True))
    monkeypatch.setattr(executor, "stop", lambda: started.append(False))
    executor.begin_test()
    executor.fresh_after_test = True
    executor.end_test()
    executor.restart_if_failed()
    assert started == [False, True], "stopped after the test, started again before the next"
    executor.begin_test()
    executor.end_test()
    executor.restart_if_failed()
    assert started == [False, True], "a test without a Triton failure keeps its executor"


def _base_with(tmp_path: Path, name: str, changes: list[tuple[str, str, str]]) -> Path:
    """A copy of the mutant base named ``name`` with each (file, old, new) text change made; old
    must occur exactly once, so a change to the base fails here, naming the file."""
    import shutil

    target = tmp_path / name
    shutil.copytree(BASE_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    for file, old, new in changes:
        path = target / file
        text = path.read_text()
        assert text.count(old) == 1, f"the mutant base's {file} changed: update {name}'s changes"
        path.write_text(text.replace(old, new))
    return target


_STICKY = [("cs336_systems/flash_attention_pytorch.py",
            "class FlashAttentionPytorch(", "_BROKEN = False\n\n\nclass FlashAttentionPytorch("),
           ("cs336_systems/flash_attention_pytorch.py",
            "    def forward(ctx, Q, K, V, is_causal=False):\n        check_inputs(Q, K, V)\n",
            "    def forward(ctx, Q, K, V, is_causal=False):\n"
            "        global _BROKEN\n"
            "        if _BROKEN or Q.dim() == 4:  # like a kernel that reads out of bounds on a 4-D input\n"
            "            _BROKEN = True\n"
            "            raise RuntimeError('CUDA error: an illegal memory access was encountered')\n"
            "        check_inputs(Q, K, V)\n")]


def test_a_cuda_error_in_one_test_does_not_fail_the_next(tmp_path):
    """A kernel's illegal memory access breaks the CUDA context for good: every later call in the
    process fails with the same error. On an H200 (2026-12-03) a real submission's kernel did this
    on a bad-input test, and the next nine tests of its process failed, each in 0.0 s, whatever
    they tested. This submission mimics it on a CPU: once its Function has raised that error, it
    raises it on every call. The next test must get a fresh process and pass."""
    sticky = _base_with(tmp_path, "sticky_cuda_error", _STICKY)
    poisoning = "tests/test_flash_forward_pytorch.py::test_flash_forward_pytorch_rejects_bad_input[all_rank4]"
    after = "tests/test_flash_forward_pytorch.py::test_flash_forward_pytorch_cs336_shape[full]"
    done = _pytest([poisoning, after, "-v", "-p", "no:randomly", "--isolate", "--executor-dir",
                    str(tmp_path / "executor"), "--submission", str(sticky)], KIT, {"TRITON_INTERPRET": "1"})
    lines = done.stdout.splitlines()
    assert any("all_rank4" in line and "FAILED" in line for line in lines), done.stdout[-4000:]
    assert "1 failed, 1 passed" in lines[-1], done.stdout[-4000:]


def test_a_dead_executors_compile_caches_are_not_read_again(tmp_path):
    from harness.process import wipe_compile_caches

    executor = _executor(tmp_path)
    cache = tmp_path / "work" / "cache"
    for name in ("inductor", "triton"):
        (cache / name / "ab").mkdir(parents=True)
        (cache / name / "ab" / "kernel.so").write_bytes(b"\x7fELF truncated")
    (cache / "matplotlib").mkdir()
    executor._fail("the process running the submission died")
    assert executor._caches_suspect
    wipe_compile_caches(cache)
    assert not (cache / "inductor").exists() and not (cache / "triton").exists()
    assert (cache / "matplotlib").exists()


# -- messages --------------------------------------------------------------------------------


def _stand_in(kind: str, message: str, trace: str):
    from harness.client import _stand_in as make

    return make({"base": kind, "type": f"builtins.{kind}", "message": message, "traceback": trace})


_ASSERT_TRACE = '''Traceback (most recent call last):
  File "/w/runtime/cs336_executor/server.py", line 120, in call
    return function(*args)
  File "/w/submission/cs336_systems/flash_attention_triton.py", line 42, in forward
    assert Q.is_cuda
AssertionError
'''


@pytest.mark.parametrize("kind, message, trace", [
    ("AssertionError", "", _ASSERT_TRACE),
    ("ValueError", "Q must be a CUDA tensor", ""),
    ("RuntimeError", "expected device cuda:0 but got cpu", ""),
])
def test_every_kind_of_cpu_refusal_is_told_the_rule(kind, message, trace):
    from harness.flash_cases import FlashCase, reporting

    case = FlashCase(batch=1, n_queries=3, n_keys=3, d=16)
    with pytest.raises(AssertionError) as caught:
        with reporting(case, "triton", "forward", "FlashAttentionTriton.apply"):
            raise _stand_in(kind, message, trace)
    text = str(caught.value)
    assert "refused CPU tensors" in text and "handout §2.4" in text, text
    if kind == "AssertionError":
        assert "assert Q.is_cuda" in text


def test_the_tests_own_assertions_are_not_taken_for_a_refusal():
    from harness.assertions import assert_meta
    from harness.flash_cases import FlashCase, reporting

    import torch

    case = FlashCase(batch=1, n_queries=3, n_keys=3, d=16)
    with pytest.raises(AssertionError) as caught:
        with reporting(case, "triton", "forward", "FlashAttentionTriton.apply"):
            assert_meta(torch.zeros(2), shape=(1, 3, 16), dtype=None, what="O", context="cuda device")
    assert "refused CPU tensors" not in str(caught.value)


def test_large_logit_hidden_checks_explain_a_refusal(monkeypatch):
    from autograder.hidden_tests import flash_hidden_checks

    class Refuses:
        __name__ = "FlashAttentionTriton"

        @staticmethod
        def apply(Q, K, V, is_causal):
            raise _stand_in("AssertionError", "", _ASSERT_TRACE)

    with pytest.raises(AssertionError) as caught:
        flash_hidden_checks.check_large_logits(Refuses, "triton", batch=1, n=4, d=16, is_causal=False, seed=1,
                                               device="cpu", backward=False)
    assert "refused CPU tensors" in str(caught.value) and "§2.4" in str(caught.value)


def test_hidden_output_keeps_the_students_frames_and_drops_the_kits():
    from autograder.redaction import hidden_text, redact_hidden

    message = ("AssertionError\nraised in the submission's process (builtins.AssertionError):\n" + _ASSERT_TRACE
               + '  File "/autograder/source/autograder/hidden_tests/test_flash_backward_hidden.py", line 43, in t\n'
               "    check_large_logits(function)\n")
    shown = redact_hidden(message, hidden_text())
    assert 'File "cs336_systems/flash_attention_triton.py", line 42, in forward' in shown, shown
    assert "assert Q.is_cuda" in shown
    assert "server.py" not in shown and "hidden_tests" not in shown and "check_large_logits" not in shown


# -- no false credit -------------------------------------------------------------------------


_TORCH_TRACE = '''Traceback (most recent call last):
  File "/w/submission/cs336_systems/flash_attention_pytorch.py", line 50, in forward
    S = Q @ K.transpose(-1, -2)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x16 and 32x32)
'''
_INSIDE_TORCH = '''Traceback (most recent call last):
  File "/w/submission/cs336_systems/flash_attention_pytorch.py", line 50, in forward
    S = torch.einsum("bqd,bkd->bqk", Q, K)
  File "/venv/lib/python3.11/site-packages/torch/functional.py", line 373, in einsum
    raise RuntimeError("einsum(): the number of subscripts in the equation (3) does not match the dimension")
RuntimeError: einsum(): ...
'''
_OWN_RAISE = '''Traceback (most recent call last):
  File "/w/submission/cs336_systems/flash_attention_inputs.py", line 57, in check_flash_attention_inputs
    raise ValueError(
ValueError: expected Q of shape (batch, n_queries, d)
'''
_REPLACED = _TORCH_TRACE + '''
During handling of the above exception, another exception occurred:

''' + _OWN_RAISE


@pytest.mark.parametrize("trace, credited", [
    (_TORCH_TRACE, False), (_INSIDE_TORCH, False), (_REPLACED, False), (_OWN_RAISE, True),
])
def test_only_the_submissions_own_raise_is_an_input_check(trace, credited):
    from tests.checks.flash_bad_inputs import own_check

    error = _stand_in("ValueError", "Q shape dimension dtype", trace)
    assert (own_check(error) is None) == credited, own_check(error)


def test_a_local_error_is_judged_by_its_own_traceback():
    import torch

    from tests.checks.flash_bad_inputs import own_check

    try:
        torch.zeros(2, 3) @ torch.zeros(2, 3)
    except RuntimeError as error:
        assert own_check(error) is not None  # raised by an operation in this (non-submission) file


_NO_CHECKS = [("cs336_systems/flash_attention_pytorch.py",
                "        check_inputs(Q, K, V)\n        batch, n_queries, d = Q.shape",
                "        batch, n_queries, d = Q.shape")]
"""The mutant base with its PyTorch Function's input check removed: it checks nothing."""


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_a_function_that_checks_nothing_earns_no_bad_input_points(tmp_path, isolate):
    """Every bad-input test fails for a Function that checks nothing (torch's own errors earn
    nothing), and all pass for the same code with its check (the base of the mutants)."""
    nothing = _base_with(tmp_path, "no_input_checks", _NO_CHECKS)
    selection = ["tests/test_flash_forward_pytorch.py", "-k", "rejects_bad_input", "-q", "-p", "no:randomly"]
    extra = ["--isolate", "--executor-dir", str(tmp_path / "executor")] if isolate else []
    env = {"TRITON_INTERPRET": "1"}
    bad = _pytest([*selection, *extra, "--submission", str(nothing)], KIT, env)
    assert " passed" not in bad.stdout.splitlines()[-1], bad.stdout[-4000:]
    assert "10 failed" in bad.stdout.splitlines()[-1], bad.stdout[-4000:]
    good = _pytest([*selection, *extra, "--submission", str(BASE_DIR)], KIT, env)
    assert good.returncode == 0 and "10 passed" in good.stdout.splitlines()[-1], good.stdout[-4000:]


def test_new_tensors_hold_nan_in_a_correctness_test_and_pytorch_defaults_in_a_timing_test(tmp_path):
    """An unwritten element of an output is NaN in every correctness test, whatever ran before in
    the process (executor/uninitialized.py); a timing test runs with PyTorch's defaults."""
    import torch

    from harness.proxies import RemoteAdapters

    (tmp_path / "cs336_systems").mkdir()
    (tmp_path / "cs336_systems" / "__init__.py").write_text("")
    (tmp_path / "adapters.py").write_text(
        "import torch\n\n\ndef unwritten():\n"
        "    return torch.empty(64), torch.empty(3, dtype=torch.int64), torch.are_deterministic_algorithms_enabled()\n")
    executor = _executor(tmp_path)
    try:
        adapters = RemoteAdapters(executor)
        executor.begin_test()
        floats, ints, deterministic = adapters.unwritten()
        executor.end_test()
        assert torch.isnan(floats).all() and (ints == torch.iinfo(torch.int64).max).all(), (floats, ints)
        executor.begin_test(timing=True)
        _, _, deterministic_when_timed = adapters.unwritten()
        executor.end_test()
        assert deterministic and not deterministic_when_timed
    finally:
        executor.stop()
