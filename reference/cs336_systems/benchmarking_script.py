"""§1.1 benchmarking_script: time the forward pass, backward pass and training step of the LM.

Reference solution. Run it as a script, for example on a GPU::

    python -m cs336_systems.benchmarking_script --model-size small medium \
        --context-length 128 256 --mode forward forward_backward train_step

or on a laptop CPU with a shrunken model::

    python -m cs336_systems.benchmarking_script --model-size small --d-model 64 --d-ff 128 \
        --num-layers 2 --num-heads 2 --context-length 32 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from cs336_systems import model_sizes

MODES = ("forward", "forward_backward", "train_step")
"""What one benchmarked step runs: a forward pass; forward and backward; a full AdamW step."""


def time_steps(
    step_fn: Callable[[], Any],
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
    timer: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Run ``warmup_steps`` untimed steps, then time ``measure_steps`` steps one by one.

    Every step is ``step_fn()`` followed by ``synchronize()``; for the timed steps both happen
    between the two ``timer()`` readings, so the time covers the device work the step queued.
    Returns ``measure_steps`` durations in seconds (floats), in order. Raises ValueError when
    ``warmup_steps`` is negative or ``measure_steps`` is not positive.
    """
    _check_step_counts(warmup_steps, measure_steps)
    for _ in range(warmup_steps):
        step_fn()
        synchronize()
    times = []
    for _ in range(measure_steps):
        start = timer()
        step_fn()
        synchronize()
        times.append(timer() - start)
    return times


def benchmark_model(
    model_size: str,
    *,
    context_length: int,
    mode: str,
    warmup_steps: int,
    measure_steps: int,
    device: str | torch.device,
    use_bf16: bool = False,
    batch_size: int = model_sizes.BATCH_SIZE,
    model_overrides: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Build the model ``model_size`` on ``device`` and time ``mode`` steps on random tokens.

    Returns a dict with the settings (``model_size``, ``context_length``, ``mode``,
    ``batch_size``, ``use_bf16``, ``device``) and ``times`` (seconds per measured step, from
    :func:`time_steps`), ``mean`` (seconds) and ``std`` (seconds; sample standard deviation,
    0.0 for a single step). Raises ValueError for an unknown size or mode, a context length
    outside 1..the model's context_length, or bad step counts.
    """
    _check_step_counts(warmup_steps, measure_steps)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size}")
    size = model_sizes.get_model_size(model_size, model_overrides)
    if not 1 <= context_length <= size.context_length:
        raise ValueError(
            f"context length {context_length} is not one the model takes; choose 1 to {size.context_length}"
        )
    device = torch.device(device)
    model = model_sizes.build_model(size, device=device)
    optimizer = torch.optim.AdamW(model.parameters()) if mode == "train_step" else None
    inputs = torch.randint(0, size.vocab_size, (batch_size, context_length), device=device)  # (batch, seq)
    targets = torch.randint(0, size.vocab_size, (batch_size, context_length), device=device)  # (batch, seq)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()

    def forward_loss() -> torch.Tensor:
        with autocast:
            logits = model(inputs)  # (batch, seq, vocab)
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def step() -> None:
        if mode == "forward":
            with torch.no_grad():
                forward_loss()
            return
        model.zero_grad(set_to_none=True)
        forward_loss().backward()
        if optimizer is not None:
            optimizer.step()

    times = time_steps(
        step, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=lambda: _synchronize(device)
    )
    return {
        "model_size": model_size,
        "context_length": context_length,
        "mode": mode,
        "batch_size": batch_size,
        "use_bf16": use_bf16,
        "device": str(device),
        "times": times,
        "mean": statistics.fmean(times),
        "std": statistics.stdev(times) if len(times) > 1 else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Benchmark every model size × context length × mode given on the command line.

    Prints one Markdown table row per combination with the mean and standard deviation in
    milliseconds (a combination that runs out of GPU memory prints OOM). Returns 0. Bad
    arguments print one line ``benchmarking_script: error: ...`` to stderr, naming the valid
    values, and return 2.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits after --help (0) or after printing an error (2)
        return int(exit_.code or 0)
    overrides = {
        name: value
        for name in ("d_model", "d_ff", "num_layers", "num_heads")
        if (value := getattr(args, name)) is not None
    }
    try:
        for name in args.model_size:
            model_sizes.get_model_size(name, overrides)  # rejects bad overrides before any work
    except ValueError as error:
        return parser.error_line(str(error))
    try:
        device = torch.device(args.device)
    except RuntimeError:
        return parser.error_line(f"argument --device: unknown device {args.device!r}; use cuda, cuda:N or cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        return parser.error_line("argument --device: CUDA is not available on this machine; use --device cpu")
    precision = "bf16 autocast" if args.bf16 else "fp32"
    print(
        f"device {device}, {precision}, batch {args.batch_size}, "
        f"{args.warmup_steps} warm-up + {args.measure_steps} measured steps"
        + (f", overrides {overrides}" if overrides else "")
    )
    print("| model size | context length | mode | mean (ms) | std (ms) |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.model_size:
        for context_length in args.context_length:
            for mode in args.mode:
                try:
                    result = benchmark_model(
                        name,
                        context_length=context_length,
                        mode=mode,
                        warmup_steps=args.warmup_steps,
                        measure_steps=args.measure_steps,
                        device=device,
                        use_bf16=args.bf16,
                        batch_size=args.batch_size,
                        model_overrides=overrides or None,
                    )
                    cells = f"{result['mean'] * 1e3:.3f} | {result['std'] * 1e3:.3f}"
                except torch.cuda.OutOfMemoryError:
                    cells = "OOM | OOM"
                finally:
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                print(f"| {name} | {context_length} | {mode} | {cells} |", flush=True)
    return 0


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _check_step_counts(warmup_steps: int, measure_steps: int) -> None:
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0; got {warmup_steps!r}")
    if not isinstance(measure_steps, int) or measure_steps < 1:
        raise ValueError(f"measure_steps must be an integer >= 1; got {measure_steps!r}")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits with 2."""

    def error(self, message: str):
        sys.exit(self.error_line(message))

    def error_line(self, message: str) -> int:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        return 2


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}; got {text!r}")
        return value

    return parse


def _context_length(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= model_sizes.MAX_CONTEXT_LENGTH:
        raise argparse.ArgumentTypeError(
            f"the models take context lengths from 1 to {model_sizes.MAX_CONTEXT_LENGTH}; got {text!r}"
        )
    return value


def _build_parser() -> _OneLineParser:
    parser = _OneLineParser(
        prog="benchmarking_script",
        description="Time forward, forward+backward or full training steps of the Transformer LM.",
    )
    parser.add_argument("--model-size", nargs="+", default=["small"], choices=list(model_sizes.MODEL_SIZES))
    parser.add_argument("--context-length", nargs="+", type=_context_length, default=[128])
    parser.add_argument("--mode", nargs="+", default=["forward_backward"], choices=MODES)
    parser.add_argument("--warmup-steps", type=_int_at_least(0), default=5, help="untimed steps first (>= 0)")
    parser.add_argument("--measure-steps", type=_int_at_least(1), default=10, help="timed steps (>= 1)")
    parser.add_argument("--batch-size", type=_int_at_least(1), default=model_sizes.BATCH_SIZE)
    parser.add_argument("--bf16", action="store_true", help="run forward and loss under bf16 autocast")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    shrink = parser.add_argument_group("shrink the model (quick runs on a CPU)")
    for name in ("d_model", "d_ff", "num_layers", "num_heads"):
        shrink.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_int_at_least(1), default=None)
    return parser


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
