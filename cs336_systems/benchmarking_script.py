"""§1.1 benchmarking_script: time the forward pass, backward pass and training step of the LM.

You write three things here (see handout/README.md, §1.1):

1. ``time_steps``: the timer. Everything else in this assignment that reports a time
   on a CPU clock uses it, so get it right first.
2. ``benchmark_model``: builds one model size and times one kind of step with ``time_steps``.
3. ``main``: the command line that benchmarks model sizes × context lengths × modes and prints
   a table, so that you can run, for example::

       python -m cs336_systems.benchmarking_script --model-size small medium \\
           --context-length 128 256 --mode forward forward_backward train_step

Why the timer has the shape it has: CUDA calls return as soon as the work is queued, so a
timer read right after ``model(x)`` measures how long it took to *queue* the kernels, not to
run them. ``torch.cuda.synchronize()`` waits until the GPU is done; it must therefore sit inside
the timed region, after each step. And the first steps pay one-off costs (CUDA context and
kernel loading, autotuning, allocator growth), so a few warm-up steps run untimed first.

The model comes from ``cs336_systems.model_sizes.build_model``; the loss is
``torch.nn.functional.cross_entropy`` and the optimizer ``torch.optim.AdamW``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from cs336_systems import model_sizes
from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.1 benchmarking_script"

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

    A *step* is ``step_fn()`` followed by ``synchronize()`` (for a GPU, ``synchronize`` is
    ``torch.cuda.synchronize``; it waits until the queued work is done).

    * Warm-up: call ``step_fn()`` then ``synchronize()`` ``warmup_steps`` times, untimed.
    * Measurement: for each of the ``measure_steps`` steps, read ``timer()``, call
      ``step_fn()``, call ``synchronize()``, read ``timer()`` again. The sync is *inside* the
      timed region: the step's time includes waiting for its device work.
    * Use ``timer`` (a high-resolution clock in seconds, ``time.perf_counter`` by default) for
      every reading: never ``time.time()``, and never a clock other than the one passed in.

    Args:
        step_fn: the work of one step; its return value is ignored.
        warmup_steps: untimed steps first; an int >= 0.
        measure_steps: timed steps; an int >= 1.
        synchronize: called once after every step, warm-up steps included.
        timer: returns the current time in seconds.

    Returns:
        ``measure_steps`` floats: the duration of each timed step in seconds, in order.

    Raises:
        ValueError: ``warmup_steps`` < 0 or ``measure_steps`` < 1 (the message names the
            argument and the value). Exceptions from ``step_fn`` propagate unchanged.
    """
    raise not_implemented(__file__, "time_steps", _SECTION)


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

    Build the model with ``model_sizes.build_model(model_size, overrides=model_overrides,
    device=device)`` and draw random token ids in ``[0, vocab_size)`` of shape
    (batch_size, context_length) as inputs and as targets, once, before timing. One step is:

    * ``"forward"``: ``logits = model(inputs)`` (you may run it under ``torch.no_grad()``);
    * ``"forward_backward"``: forward, ``loss = torch.nn.functional.cross_entropy`` over the
      flattened logits (batch*seq, vocab) and targets (batch*seq,), then ``loss.backward()``;
    * ``"train_step"``: as ``"forward_backward"``, then ``optimizer.step()`` of a
      ``torch.optim.AdamW`` over ``model.parameters()`` built once before timing. Zero the
      gradients every step so they do not pile up.

    With ``use_bf16=True``, run the forward pass and the loss inside
    ``torch.autocast(device_type=device.type, dtype=torch.bfloat16)`` (the backward pass and the
    optimizer step stay outside it). Time the steps with :func:`time_steps`, passing a
    ``synchronize`` that calls ``torch.cuda.synchronize()`` when ``device`` is a CUDA device and
    does nothing otherwise (look it up at call time: tests may watch ``torch.cuda.synchronize``).

    Returns:
        A dict with keys ``model_size`` (str), ``context_length`` (int), ``mode`` (str),
        ``batch_size`` (int), ``use_bf16`` (bool), ``device`` (str), ``times`` (list of
        ``measure_steps`` floats, seconds per step, as :func:`time_steps` returned them),
        ``mean`` (float, seconds: the mean of ``times``) and ``std`` (float, seconds: the
        sample standard deviation of ``times``, with n - 1 in the denominator as
        ``statistics.stdev``; 0.0 when there is a single time).

    Raises:
        ValueError: unknown ``model_size`` (list the names in ``model_sizes.MODEL_SIZES``);
            unknown ``mode`` (list ``MODES``); ``context_length`` outside 1 to the model's
            ``context_length`` (say the range); ``warmup_steps`` < 0; ``measure_steps`` < 1;
            ``batch_size`` < 1. Check all of these before building the model.
    """
    raise not_implemented(__file__, "benchmark_model", _SECTION)


def main(argv: list[str] | None = None) -> int:
    """The command line: benchmark every model size × context length × mode given.

    Options (each of the first three takes one or more values):

    * ``--model-size`` names from ``model_sizes.MODEL_SIZES`` (default: small);
    * ``--context-length`` integers from 1 to ``model_sizes.MAX_CONTEXT_LENGTH`` (default 128);
    * ``--mode`` values from ``MODES`` (default: forward_backward);
    * ``--warmup-steps`` (int >= 0, default 5), ``--measure-steps`` (int >= 1, default 10),
      ``--batch-size`` (int >= 1, default 4), ``--bf16`` (flag: bf16 autocast), ``--device``
      (default ``cuda`` when available, else ``cpu``);
    * ``--d-model``, ``--d-ff``, ``--num-layers``, ``--num-heads``: optional overrides that
      shrink the model for quick runs on a CPU (passed to ``benchmark_model`` as
      ``model_overrides``).

    For each combination it calls :func:`benchmark_model` and prints a Markdown table row
    ``| model size | context length | mode | mean (ms) | std (ms) |`` to stdout, with the
    mean and standard deviation in milliseconds; a combination that raises
    ``torch.cuda.OutOfMemoryError`` prints ``OOM`` in both cells and the others still run.

    Returns:
        0 after a run; 0 after ``--help``.

    Bad input (unknown model size or mode, a step count out of range, a context length the
    models cannot take, an unusable device, overrides that make no model): print exactly one
    line to stderr, ``benchmarking_script: error: <what is wrong, and the valid values>``, no
    usage block and no traceback, and return 2 (argparse's exit status for usage errors) before
    benchmarking anything. Tip: subclass ``argparse.ArgumentParser`` and override ``error``.
    """
    raise not_implemented(__file__, "main", _SECTION)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
