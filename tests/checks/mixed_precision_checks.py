"""The harness's own answers for §1.4 mixed_precision_accumulation and §1.5 benchmarking_mixed_precision.

Read by their visible and hidden tests. Nothing here imports the submission: the truth is
computed from the contracts (the same additions; CS336's ToyModel rebuilt here).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def accumulated(value: float, steps: int, accumulator_dtype: torch.dtype, addend_dtype: torch.dtype) -> torch.Tensor:
    total = torch.zeros((), dtype=accumulator_dtype)
    addend = torch.tensor(value, dtype=addend_dtype)
    for _ in range(steps):
        total += addend.to(accumulator_dtype)
    return total


def assert_accumulates(adapters, value: float, steps: int, accumulator_dtype: torch.dtype, addend_dtype: torch.dtype):
    got = adapters.run_accumulate(value, steps, accumulator_dtype=accumulator_dtype, addend_dtype=addend_dtype)
    expected = accumulated(value, steps, accumulator_dtype, addend_dtype)
    call = f"accumulate({value}, {steps}, accumulator_dtype={accumulator_dtype}, addend_dtype={addend_dtype})"
    assert isinstance(got, torch.Tensor) and got.dim() == 0 and got.dtype == accumulator_dtype, (
        f"{call} must return a 0-dim tensor of the accumulator's dtype; got "
        f"{(tuple(got.shape), got.dtype) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert torch.equal(got, expected), (
        f"{call} returned {got.item()!r}; expected {expected.item()!r} (round value once to addend_dtype, then "
        "total += addend.to(accumulator_dtype) each step, so every partial sum is rounded to the accumulator's dtype)")


class ToyModel(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.fc2(self.ln(self.relu(self.fc1(x))))


def expected_autocast_dtypes(dtype: torch.dtype, device: str) -> dict[str, str]:
    model = ToyModel(8, 4).to(device)
    x, y = torch.randn(2, 8, device=device), torch.randint(0, 4, (2,), device=device)
    with torch.autocast(torch.device(device).type, dtype=dtype):
        h = model.fc1(x)
        n = model.ln(model.relu(h))
        logits = model.fc2(n)
        loss = F.cross_entropy(logits, y)
        param = model.fc1.weight.dtype
    loss.backward()
    seen = {"parameters": param, "fc1_output": h.dtype, "layer_norm_output": n.dtype, "logits": logits.dtype,
            "loss": loss.dtype, "gradients": model.fc1.weight.grad.dtype}
    return {key: str(value).removeprefix("torch.") for key, value in seen.items()}


def assert_autocast_dtypes(adapters, dtype: torch.dtype, device: str) -> None:
    got = adapters.run_autocast_dtypes(dtype, device)
    expected = expected_autocast_dtypes(dtype, device)
    assert got == expected, (
        f"autocast_dtypes({dtype}, {device!r}) returned {got}; under torch.autocast on {device} the dtypes are "
        f"{expected} (matmuls run in {dtype}; parameters and their gradients stay float32)")


def assert_compares_precisions(lm_spy, *, context_length: int, mode: str, warmup_steps: int, measure_steps: int):
    from tests.checks.model_spies import TINY_MODEL

    results = lm_spy.run("run_compare_precisions", "small", context_length=context_length, mode=mode,
                         warmup_steps=warmup_steps, measure_steps=measure_steps, device="cpu", batch_size=2,
                         model_overrides=TINY_MODEL)
    assert isinstance(results, list) and len(results) == 2, (
        f"compare_precisions must return [full-precision result, bf16 result]; got {results!r}"[:400])
    flags = [r.get("use_bf16") if isinstance(r, dict) else None for r in results]
    assert flags == [False, True], f"the results' use_bf16 must be [False, True] in that order; got {flags}"
    for r in results:
        assert (r["mode"], r["context_length"], len(r["times"])) == (mode, context_length, measure_steps), (
            f"each result must be benchmark_model's for the arguments given (mode {mode!r}, context length "
            f"{context_length}, {measure_steps} times); got mode {r['mode']!r}, context length {r['context_length']}, "
            f"{len(r['times'])} times")
    per_run = warmup_steps + measure_steps
    assert lm_spy.models_built == 2 and lm_spy.forward_calls == 2 * per_run, (
        f"expected two benchmark_model runs: 2 models built and {2 * per_run} forward passes; saw "
        f"{lm_spy.models_built} models and {lm_spy.forward_calls} forward passes")
    first, second = lm_spy.autocast_enabled[:per_run], lm_spy.autocast_enabled[per_run:]
    assert not any(first) and all(second), (
        f"the first run must be full precision and the second under autocast; autocast was on in forward passes "
        f"{lm_spy.autocast_enabled}")
    assert set(lm_spy.autocast_dtypes[per_run:]) == {torch.bfloat16}, (
        f"the second run's autocast dtype must be bfloat16; saw {set(lm_spy.autocast_dtypes[per_run:])}")
