"""Visible tests of §1.1 benchmarking_script: the timer time_steps, benchmark_model and the CLI.

The timer is checked on a CPU with fakes: a fake clock that only moves when the fake step or
the fake sync runs, and a sync that really sleeps (they run here, called back by the
submission). benchmark_model runs a tiny model on the CPU while a spy next to the submission
counts forward passes, backward passes and optimizer steps; the CLI runs there with its output
captured (executor/probes/benchmarking_script.py).
"""

from __future__ import annotations

import statistics

import pytest
import torch

from tests.checks import timing_checks
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL, LMSpy, lm_spy, outcome_value  # noqa: F401 (lm_spy is a fixture)

TINY_CLI = ["--d-model", "16", "--d-ff", "32", "--num-layers", "1", "--num-heads", "2", "--device", "cpu"]


def run_cli(adapters, argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI with its output captured: (status, stdout, stderr); an argparse-style SystemExit
    counts as returning its code, any other error is raised."""
    seen = run_probe(adapters, "benchmarking_script.run_cli", argv)
    try:
        status = outcome_value(seen["outcome"])
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    return status, seen["stdout"], seen["stderr"]


# ----------------------------------------------------------------------------- time_steps


def test_time_steps_returns_one_float_per_measured_step(adapters):
    timing_checks.check_returns_one_float_per_measured_step(adapters.run_time_steps)


def test_time_steps_excludes_warmup(adapters):
    timing_checks.check_excludes_warmup(adapters.run_time_steps)


def test_time_steps_sync_inside_timed_region(adapters):
    timing_checks.check_sync_inside_timed_region(adapters.run_time_steps)


def test_time_steps_syncs_after_every_step(adapters):
    timing_checks.check_syncs_after_every_step(adapters.run_time_steps)


def test_time_steps_uses_given_timer(adapters):
    timing_checks.check_uses_given_timer(adapters.run_time_steps)


def test_time_steps_with_a_sync_that_sleeps(adapters):
    timing_checks.check_real_sync_is_timed(adapters.run_time_steps)


@pytest.mark.parametrize(("warmup_steps", "measure_steps"), [(-1, 3), (2, 0)])
def test_time_steps_rejects_bad_step_counts(adapters, warmup_steps, measure_steps):
    with pytest.raises(ValueError):
        adapters.run_time_steps(
            lambda: None, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=lambda: None
        )


# ----------------------------------------------------------------------------- benchmark_model


def benchmark_tiny(adapters, mode: str, **kwargs):
    """benchmark_model of a tiny "small" model on the CPU; through ``adapters`` or an ``LMSpy``."""
    settings = dict(
        context_length=8, mode=mode, warmup_steps=1, measure_steps=2, device="cpu", model_overrides=TINY_MODEL
    )
    settings.update(kwargs)
    if isinstance(adapters, LMSpy):
        return adapters.run("run_benchmark_model", "small", **settings)
    return adapters.run_benchmark_model("small", **settings)


def test_benchmark_model_result(adapters):
    result = benchmark_tiny(adapters, "forward", measure_steps=3)
    for key in ("model_size", "context_length", "mode", "batch_size", "use_bf16", "device", "times", "mean", "std"):
        assert key in result, f"benchmark_model's result must have the key {key!r}; it has {sorted(result)}"
    times = result["times"]
    assert len(times) == 3 and all(isinstance(t, float) and t > 0 for t in times), (
        f"'times' must hold measure_steps=3 positive floats (seconds); got {times!r}"
    )
    assert result["mean"] == pytest.approx(statistics.fmean(times)), "'mean' must be the mean of 'times'"
    assert result["std"] == pytest.approx(statistics.stdev(times)), (
        "'std' must be the sample standard deviation of 'times' (statistics.stdev, n - 1 in the denominator)"
    )
    assert (result["model_size"], result["context_length"], result["mode"], result["batch_size"]) == (
        "small",
        8,
        "forward",
        4,
    ), f"the result must echo the settings; got {result}"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("forward", {"forward": 3, "backward": 0, "optimizer.step": 0}),
        ("forward_backward", {"forward": 3, "backward": 3, "optimizer.step": 0}),
        ("train_step", {"forward": 3, "backward": 3, "optimizer.step": 3}),
    ],
)
def test_benchmark_model_modes_run_the_right_work(lm_spy, mode, expected):
    benchmark_tiny(lm_spy, mode, warmup_steps=1, measure_steps=2, batch_size=3)
    assert lm_spy.counts() == expected, (
        f"mode={mode!r} with 1 warm-up and 2 measured steps must run {expected} (warm-up steps "
        f"included); it ran {lm_spy.counts()}"
    )
    assert set(lm_spy.input_shapes) == {(3, 8)}, (
        f"inputs must be token ids of shape (batch_size, context_length) = (3, 8); got {set(lm_spy.input_shapes)}"
    )
    if mode == "train_step":
        assert set(lm_spy.optimizer_types) == {"AdamW"}, (
            f"the optimizer must be torch.optim.AdamW; got {set(lm_spy.optimizer_types)}"
        )


def test_benchmark_model_bf16_autocast(lm_spy):
    benchmark_tiny(lm_spy, "forward_backward", use_bf16=True)
    assert all(lm_spy.autocast_enabled) and set(lm_spy.autocast_dtypes) == {torch.bfloat16}, (
        "with use_bf16=True the forward pass must run inside torch.autocast(device_type, dtype=torch.bfloat16); "
        f"autocast was enabled: {lm_spy.autocast_enabled}, dtypes {set(lm_spy.autocast_dtypes)}"
    )
    assert set(lm_spy.logits_dtypes) == {torch.bfloat16}, f"bf16 autocast gives bf16 logits; got {lm_spy.logits_dtypes}"


def test_benchmark_model_fp32_has_no_autocast(lm_spy):
    benchmark_tiny(lm_spy, "forward_backward", use_bf16=False)
    assert not any(lm_spy.autocast_enabled), "with use_bf16=False the forward pass must not run under autocast"


@pytest.mark.parametrize(
    "bad",
    [
        {"model_size": "huge"},
        {"mode": "backward_only"},
        {"context_length": 0},
        {"context_length": 1025},
        {"measure_steps": 0},
    ],
    ids=lambda bad: next(iter(bad)) + "=" + str(next(iter(bad.values()))),
)
def test_benchmark_model_rejects_bad_input(adapters, bad):
    settings = dict(
        context_length=8, mode="forward", warmup_steps=0, measure_steps=1, device="cpu", model_overrides=TINY_MODEL
    )
    bad = dict(bad)
    model_size = bad.pop("model_size", "small")
    settings.update(bad)
    with pytest.raises(ValueError):
        adapters.run_benchmark_model(model_size, **settings)


@pytest.mark.gpu
@pytest.mark.parametrize("use_bf16", [False, True])
def test_benchmark_model_on_gpu_synchronizes(lm_spy, use_bf16):
    result = lm_spy.run(
        "run_benchmark_model",
        "small", context_length=128, mode="train_step", warmup_steps=2, measure_steps=3, device="cuda", use_bf16=use_bf16
    )
    assert lm_spy.cuda_syncs >= 5, (
        f"every one of the 5 steps must end with torch.cuda.synchronize(); it ran {lm_spy.cuda_syncs} times"
    )
    assert len(result["times"]) == 3 and all(t > 0 for t in result["times"]), (
        f"measure_steps=3 must give 3 positive times (seconds); got {result['times']}"
    )
    expected = torch.bfloat16 if use_bf16 else torch.float32
    assert set(lm_spy.logits_dtypes) == {expected}, (
        f"with use_bf16={use_bf16} the logits must be {expected} (bf16 autocast only when asked); got {lm_spy.logits_dtypes}"
    )


# ----------------------------------------------------------------------------- the CLI


def test_cli_prints_mean_and_std_per_combination(adapters):
    argv = ["--model-size", "small", "--context-length", "8", "16", "--mode", "forward"]
    status, out, _ = run_cli(adapters, argv + ["--warmup-steps", "1", "--measure-steps", "2"] + TINY_CLI)
    assert status == 0, f"the CLI must return 0 after a run; got {status}"
    rows = [line for line in out.splitlines() if line.startswith("| small")]
    assert len(rows) == 2, f"expected one table row per size × context length × mode (2); got:\n{out}"
    for context_length in ("8", "16"):
        for mode in ("forward",):
            matching = [row for row in rows if f"| {context_length} |" in row and f"| {mode} |" in row]
            assert matching, f"no row for context length {context_length}, mode {mode} in:\n{out}"
            cells = [cell.strip() for cell in matching[0].strip("|").split("|")]
            numbers = [float(cell) for cell in cells[-2:]]
            assert numbers[0] > 0 and numbers[1] >= 0, f"the last two cells must be mean and std (ms); got {cells}"


@pytest.mark.parametrize(
    ("argv", "must_mention"),
    [
        (["--model-size", "huge"], ["small", "medium", "large", "xl", "2.7B"]),
        (["--mode", "backward_only"], ["forward", "forward_backward", "train_step"]),
        (["--context-length", "4096"], ["1024"]),
        (["--measure-steps", "0"], ["measure"]),
        (["--warmup-steps", "-1"], ["warmup"]),
    ],
    ids=["model-size", "mode", "context-length", "measure-steps", "warmup-steps"],
)
def test_cli_bad_input_is_one_line_error(adapters, argv, must_mention):
    status, out, err = run_cli(adapters, argv + TINY_CLI)
    assert status == 2, f"bad input {argv} must exit with status 2 (like argparse); got {status}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"bad input {argv} must print exactly one line to stderr; got:\n{err}"
    assert "Traceback" not in err and "error" in lines[0], f"expected '...: error: ...'; got {lines[0]!r}"
    missing = [word for word in must_mention if word not in lines[0]]
    assert not missing, f"the error line must name the valid values ({must_mention}); it lacks {missing}: {lines[0]!r}"
    assert "| small" not in out, "nothing may be benchmarked after bad input"
