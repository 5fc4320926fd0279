"""Hidden tests of §1.1 benchmarking_script: other step counts, uneven steps, the statistics,
checks that come before any work, and more of the command line."""

from __future__ import annotations

import statistics

import pytest
import torch

from tests.checks import timing_checks
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL, LMSpy, lm_spy, outcome_value  # noqa: F401 (lm_spy is a fixture)

TINY_CLI = ["--d-model", "16", "--d-ff", "32", "--num-layers", "1", "--num-heads", "2", "--device", "cpu"]


def run_cli(adapters, argv):
    """(status, stdout, stderr) of the CLI run next to the submission; SystemExit counts as its code."""
    seen = run_probe(adapters, "benchmarking_script.run_cli", argv)
    try:
        status = outcome_value(seen["outcome"])
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    return status, seen["stdout"], seen["stderr"]


@pytest.mark.parametrize(("warmup_steps", "measure_steps"), [(0, 1), (5, 7), (1, 4)])
@pytest.mark.parametrize(
    "check",
    [
        timing_checks.check_returns_one_float_per_measured_step,
        timing_checks.check_excludes_warmup,
        timing_checks.check_sync_inside_timed_region,
        timing_checks.check_syncs_after_every_step,
    ],
    ids=lambda check: check.__name__.removeprefix("check_"),
)
def test_timer_with_other_step_counts(adapters, check, warmup_steps, measure_steps):
    check(adapters.run_time_steps, warmup_steps=warmup_steps, measure_steps=measure_steps)


def test_uneven_steps_are_timed_in_order_with_the_given_clock(adapters):
    clock = {"now": 12_345.5, "steps": 0}
    costs = [50.0, 1.0, 2.0, 3.0]  # one warm-up step, then three measured steps

    def step():
        clock["now"] += costs[clock["steps"]]
        clock["steps"] += 1

    def synchronize():
        clock["now"] += 0.5

    times = adapters.run_time_steps(
        step, warmup_steps=1, measure_steps=3, synchronize=synchronize, timer=lambda: clock["now"]
    )
    assert times == pytest.approx([1.5, 2.5, 3.5]), (
        f"measured steps cost 1, 2 and 3 s plus a 0.5 s sync each on the clock passed as timer; expected "
        f"[1.5, 2.5, 3.5] in order, got {times}"
    )


def test_step_errors_propagate(adapters):
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyError("step 2 failed")

    with pytest.raises(KeyError, match="step 2 failed"):
        adapters.run_time_steps(step, warmup_steps=1, measure_steps=3, synchronize=lambda: None)


def tiny(adapters, **kwargs):
    """benchmark_model of a tiny "small" model on the CPU; through ``adapters`` or an ``LMSpy``."""
    settings = dict(
        context_length=8, mode="forward", warmup_steps=0, measure_steps=1, device="cpu", model_overrides=TINY_MODEL
    )
    settings.update(kwargs)
    if isinstance(adapters, LMSpy):
        return adapters.run("run_benchmark_model", "small", **settings)
    return adapters.run_benchmark_model("small", **settings)


def test_std_of_one_step_is_zero(adapters):
    result = tiny(adapters, measure_steps=1)
    assert len(result["times"]) == 1 and result["std"] == 0.0, f"one measured step gives std 0.0; got {result}"
    assert result["mean"] == pytest.approx(result["times"][0])


def test_mean_and_sample_std_of_four_steps(adapters):
    result = tiny(adapters, mode="forward_backward", warmup_steps=2, measure_steps=4)
    times = result["times"]
    assert len(times) == 4
    assert result["mean"] == pytest.approx(statistics.fmean(times))
    assert result["std"] == pytest.approx(statistics.stdev(times)), (
        f"std must be the sample standard deviation (n - 1): {statistics.stdev(times)}; population std would be "
        f"{statistics.pstdev(times)}; got {result['std']}"
    )


def test_longest_context_and_no_warmup_are_accepted(lm_spy):
    result = tiny(lm_spy, context_length=1024, batch_size=1, warmup_steps=0, measure_steps=1)
    assert result["context_length"] == 1024 and lm_spy.input_shapes == [(1, 1024)], lm_spy.input_shapes


@pytest.mark.parametrize(
    "bad",
    [{"batch_size": 0}, {"warmup_steps": -2}, {"context_length": 4096}, {"mode": "inference"}],
    ids=["batch_size=0", "warmup_steps=-2", "context_length=4096", "mode=inference"],
)
def test_bad_input_is_refused_before_building_the_model(lm_spy, bad):
    with pytest.raises(ValueError):
        tiny(lm_spy, **bad)
    assert not lm_spy.models_built, (
        f"{bad} must be refused before the model is built; it was built {lm_spy.models_built} times"
    )


def test_cli_runs_every_combination_in_order(adapters):
    argv = ["--model-size", "small", "medium", "--context-length", "8", "--mode", "forward", "forward_backward"]
    status, out, _ = run_cli(adapters, argv + ["--warmup-steps", "0", "--measure-steps", "1"] + TINY_CLI)
    assert status == 0, f"expected status 0; got {status}"
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| small") or line.startswith("| medium")]
    combos = [(row[0], row[1], row[2]) for row in rows]
    assert combos == [
        ("small", "8", "forward"), ("small", "8", "forward_backward"),
        ("medium", "8", "forward"), ("medium", "8", "forward_backward"),
    ], f"expected one row per size × context length × mode, sizes outermost, modes innermost; got {combos}"


def test_cli_passes_bf16_and_batch_size(lm_spy):
    argv = ["--context-length", "8", "--mode", "forward", "--bf16", "--batch-size", "3"]
    try:
        status = lm_spy.run("run_benchmarking_cli", argv + ["--warmup-steps", "0", "--measure-steps", "1"] + TINY_CLI)
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    assert status == 0
    assert set(lm_spy.input_shapes) == {(3, 8)}, f"--batch-size 3 --context-length 8 gives (3, 8) inputs; got {lm_spy.input_shapes}"
    assert all(lm_spy.autocast_enabled) and set(lm_spy.autocast_dtypes) == {torch.bfloat16}, "--bf16 must turn on bf16 autocast"


@pytest.mark.parametrize(
    ("argv", "must_mention"),
    [
        (["--batch-size", "0"], ["batch"]),
        (["--context-length", "abc"], ["abc"]),
        (["--num-heads", "7"], ["7"]),
        (["--model-size", "XL"], ["xl", "2.7B"]),
    ],
    ids=["batch-size", "context-length-not-a-number", "heads-do-not-divide", "size-is-case-sensitive"],
)
def test_cli_more_bad_input(adapters, argv, must_mention):
    status, _, err = run_cli(adapters, TINY_CLI + argv)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, (
        f"bad input {argv} must give status 2 and one stderr line; got status {status}, stderr:\n{err}"
    )
    missing = [word for word in must_mention if word not in lines[0]]
    assert not missing, f"the error line must mention {must_mention}; it lacks {missing}: {lines[0]!r}"


@pytest.mark.gpu
def test_cli_out_of_memory_row_and_the_rest_still_run(adapters):
    argv = ["--context-length", "1024", "8", "--mode", "forward", "--batch-size", "20000", "--device", "cuda",
            "--warmup-steps", "0", "--measure-steps", "1", "--d-model", "64", "--d-ff", "128", "--num-layers", "1",
            "--num-heads", "2"]
    status, out, _ = run_cli(adapters, argv)
    rows = [line for line in out.splitlines() if line.startswith("| small")]
    assert status == 0 and len(rows) == 2, f"expected two rows; got status {status}, output:\n{out}"
    assert "OOM" in rows[0] and "OOM" not in rows[1], f"context 1024 at batch 20000 runs out of memory, 8 fits:\n{out}"
