"""A correctness test compiles one autotune config, a timing test benchmarks them all, and an
every-config test runs the n-th.

Read by staff changing executor/autotune.py. The executor installs its wrapper on GPU
runners; these checks run it under Triton's CPU interpreter, in a child process, with an
autotuner whose configs record when they are tried (a config's ``pre_hook`` runs each time the
autotuner launches it, compiled or not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

KIT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch, triton, triton.language as tl
    from triton.runtime.errors import OutOfResources
    from executor.autotune import autotune_mode, install

    install(interpreter=sys.argv[3] == "interpreter")  # "gpu": the fake do_bench stands in for timing
    tried = []

    def hook(index, too_big=False):
        def pre_hook(nargs):
            tried.append(index)
            if too_big:
                raise OutOfResources(300000, 232448, "shared memory")
        return pre_hook

    timed = []

    def fake_bench(kernel_call, quantiles=None):
        kernel_call()
        timed.append(len(tried))
        return [3.0 - len(timed), 0.0, 0.0]  # later configs "faster": the full tuner keeps the last

    configs = [triton.Config({"BLOCK": 4}, pre_hook=hook(0, too_big=True)),
               triton.Config({"BLOCK": 8}, pre_hook=hook(1)),
               triton.Config({"BLOCK": 16}, pre_hook=hook(2))]

    @triton.autotune(configs=configs, key=["n"], do_bench=fake_bench)
    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)

    def launch(n):
        x = torch.arange(n, dtype=torch.float32)
        out = torch.zeros_like(x)
        double[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        assert torch.equal(out, 2 * x), out
        return double.best_config.kwargs["BLOCK"]

    report = {}
    with autotune_mode(sys.argv[1]) as tally:
        report["chosen"] = launch(40)
        report["tried"] = list(tried)
        report["timed"] = len(timed)
    report["configs"] = tally.configs
    tried.clear()
    with autotune_mode(sys.argv[2]):
        report["chosen_after"] = launch(40)
        report["tried_after"] = list(tried)
    print(json.dumps(report))
""")


def _run(first: str, second: str, runner: str = "gpu", interpreter_config: str = "0") -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(KIT),
           "CS336_INTERPRET_AUTOTUNE_CONFIG": interpreter_config}
    done = subprocess.run([sys.executable, "-c", SCRIPT, first, second, runner], cwd=KIT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_first_mode_skips_a_config_that_does_not_fit_and_never_tries_the_rest():
    report = _run("first", "first")
    assert report["chosen"] == 8, report  # config 0 is out of resources, config 1 launches
    # 0 refused, 1 tried once to choose it and once for the real launch; 2 never tried
    assert report["tried"] == [0, 1, 1], report
    assert report["timed"] == 0, "a correctness test must not benchmark the configs"
    assert report["tried_after"] == [1], "the next call with the same key reuses the choice"


def test_full_mode_benchmarks_every_config_and_keeps_its_own_choice():
    report = _run("first", "full")
    assert report["chosen"] == 8, report
    # The timing test does not inherit the untimed choice: it benchmarks configs 1 and 2 (0 does
    # not fit) and keeps the one its benchmark says is fastest.
    assert report["chosen_after"] == 16, report
    assert 2 in report["tried_after"], report


def test_config_mode_runs_the_nth_config_and_counts_the_configs():
    report = _run("config:2", "config:1")
    assert (report["chosen"], report["tried"], report["timed"]) == (16, [2], 0), report
    assert report["configs"] == 3, "the harness runs its check once per config: it needs the count"
    assert (report["chosen_after"], report["tried_after"]) == (8, [1]), report


def test_config_mode_runs_the_first_that_fits_for_a_config_that_does_not_fit_or_does_not_exist():
    report = _run("config:0", "config:7")
    assert report["chosen"] == 8, report  # config 0 is out of resources: the autotuner would skip it
    assert report["timed"] == 0, report
    assert report["chosen_after"] == 8, report


def test_the_interpreter_runs_the_chosen_config_in_every_mode_but_config_mode():
    # Under the interpreter nothing is timed: "first" and "full" run $CS336_INTERPRET_AUTOTUNE_CONFIG.
    report = _run("first", "full", runner="interpreter", interpreter_config="2")
    assert (report["chosen"], report["tried"], report["timed"]) == (16, [2], 0), report
    assert (report["chosen_after"], report["tried_after"]) == (16, [2]), report
    report = _run("config:1", "config:9", runner="interpreter", interpreter_config="2")
    assert (report["chosen"], report["tried"], report["configs"]) == (8, [1], 3), report
    assert report["chosen_after"] == 16, "a config past the last runs the interpreter's own choice"


def _every_config_failure(mutant: str, tmp_path: Path, backward: bool) -> str:
    """What the every-config check of ``mutant`` raises when run through an executor, as the
    grader runs it ("" if it passes); the plain check (first config) must pass."""
    import torch

    from fixtures import materialize
    from fixtures.mutants import get
    from harness.flash_cases import FlashCase, check_backward, check_forward
    from harness.client import Executor
    from harness.process import ExecutorSettings
    from harness.proxies import RemoteAdapters
    from harness.autotune_configs import EachAutotuneConfig

    submission = materialize(get(mutant), tmp_path / mutant)
    executor = Executor(ExecutorSettings(submission=submission, workdir=tmp_path / f"{mutant}-work", test_timeout_s=120.0))
    case = FlashCase(batch=1, n_queries=70, n_keys=45, d=32, dtype=torch.float32, is_causal=False, device="cpu")
    try:
        executor.begin_test()
        function = RemoteAdapters(executor).get_flashattention_autograd_function_triton()
        check = (lambda: check_backward(function, case, "triton")) if backward else (lambda: check_forward(function, case, "triton"))
        check()  # the first config is right
        try:
            EachAutotuneConfig(executor).run(check, backward_only=backward)
        except AssertionError as failure:
            return str(failure)
        return ""
    finally:
        executor.stop()


def test_the_every_config_checks_fail_through_the_executor_naming_the_config(tmp_path, monkeypatch):
    """The grader's path: the harness asks the executor for config n and compares the outputs
    itself. Each mutant's config 0 is right and its config 1 is not. The backward check varies
    the backward's configs only, so the forward's bad config passes there."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("CS336_INTERPRET_AUTOTUNE_CONFIG", raising=False)
    failure = _every_config_failure("autotune_grid_ignores_tile", tmp_path, backward=False)
    assert failure.startswith("with config 1 of 2 of your autotuned kernels"), failure[:2000]
    failure = _every_config_failure("autotune_backward_grid_ignores_tile", tmp_path, backward=True)
    assert failure.startswith("with config 1 of 2 of your autotuned kernels"), failure[:2000]
    assert "dK mismatch" in failure or "dQ mismatch" in failure or "dV mismatch" in failure, failure[:2000]
    assert _every_config_failure("autotune_grid_ignores_tile", tmp_path, backward=True) == ""


def test_every_test_of_the_submission_runs_each_config_and_names_the_one_that_failed(tmp_path):
    """The plugin in harness/autotune_configs.py: an ordinary backward test (not an
    every-config one) of a mutant whose backward config 1 is wrong fails, naming config 1, under
    the grader's ``--isolate`` (its config 0 passes: the every-config test above shows it)."""
    from fixtures import materialize
    from fixtures.mutants import get

    submission = materialize(get("autotune_backward_grid_ignores_tile"), tmp_path / "mutant")
    test = "tests/test_flash_backward.py::test_flash_backward_cs336_shape[triton-causal]"

    environ = {key: value for key, value in os.environ.items()
               if key not in ("CS336_AUTOTUNE", "CS336_INTERPRET_AUTOTUNE_CONFIG", "PYTEST_XDIST_WORKER")}
    looped = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                             test, "--isolate", "--submission", str(submission)],
                            cwd=KIT, env=environ, capture_output=True, text=True, timeout=600)
    assert looped.returncode == 1 and "1 failed" in looped.stdout, looped.stdout[-3000:]
    assert "with config 1 of 2 of your autotuned kernels" in looped.stdout, looped.stdout[-3000:]
