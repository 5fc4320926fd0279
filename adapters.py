"""Glue between the tests and your code: the only file the tests import from your submission.

Each function returns or runs one piece of your implementation. The default bodies call the
stubs in ``cs336_systems/``; if you organise your code differently, change the bodies here,
but keep every function's name, arguments and return value.

Imports are inside the functions on purpose: an error in one of your files then fails only
the tests of that problem, not the whole suite.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

# -- Provided: the Transformer LM (cs336_systems/model.py, model_sizes.py); no need to edit ----


def get_transformer_lm(
    model_size: str = "small",
    *,
    model_overrides: dict[str, int] | None = None,
    attention_fn: Callable[..., torch.Tensor] | None = None,
    device: str | torch.device = "cpu",
) -> torch.nn.Module:
    """Build the provided TransformerLM of ``model_size``; see ``model_sizes.build_model``."""
    from cs336_systems.model_sizes import build_model

    return build_model(model_size, overrides=model_overrides, attention_fn=attention_fn, device=device)


def get_scaled_dot_product_attention() -> Callable[..., torch.Tensor]:
    """Return the provided model's attention, ``model.scaled_dot_product_attention``."""
    from cs336_systems.model import scaled_dot_product_attention

    return scaled_dot_product_attention


def get_use_attention() -> Callable[[Callable[..., torch.Tensor]], Any]:
    """Return the provided ``model.use_attention``: ``with use_attention(fn):`` swaps the models' attention."""
    from cs336_systems.model import use_attention

    return use_attention


# -- §1.1 benchmarking_script --------------------------------------------------------------


def run_time_steps(
    step_fn: Callable[[], Any],
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
    timer: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Time ``measure_steps`` calls of ``step_fn`` after ``warmup_steps`` untimed ones.

    Returns one duration in seconds per measured step; each includes ``synchronize()``.
    See ``cs336_systems.benchmarking_script.time_steps``.
    """
    from cs336_systems.benchmarking_script import time_steps

    return time_steps(
        step_fn, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=synchronize, timer=timer
    )


def run_benchmark_model(
    model_size: str,
    *,
    context_length: int,
    mode: str,
    warmup_steps: int,
    measure_steps: int,
    device: str | torch.device,
    use_bf16: bool = False,
    batch_size: int = 4,
    model_overrides: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Benchmark one model size at one context length; see ``benchmarking_script.benchmark_model``."""
    from cs336_systems.benchmarking_script import benchmark_model

    return benchmark_model(
        model_size,
        context_length=context_length,
        mode=mode,
        warmup_steps=warmup_steps,
        measure_steps=measure_steps,
        device=device,
        use_bf16=use_bf16,
        batch_size=batch_size,
        model_overrides=model_overrides,
    )


def run_benchmarking_cli(argv: list[str]) -> int:
    """Run the benchmarking command line with ``argv``; return its exit status."""
    from cs336_systems.benchmarking_script import main

    return main(argv)


# -- §1.2 nsys_profile ---------------------------------------------------------------------


def get_annotated_scaled_dot_product_attention() -> Callable[..., torch.Tensor]:
    """Return attention annotated with NVTX ranges; see ``nsys_profile.annotated_scaled_dot_product_attention``."""
    from cs336_systems.nsys_profile import annotated_scaled_dot_product_attention

    return annotated_scaled_dot_product_attention


def run_profiled_training(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
) -> None:
    """Run training steps annotated by phase; see ``nsys_profile.profiled_training``."""
    from cs336_systems.nsys_profile import profiled_training

    profiled_training(
        model,
        optimizer,
        inputs,
        targets,
        warmup_steps=warmup_steps,
        measure_steps=measure_steps,
        synchronize=synchronize,
    )


# -- §1.3 memory_profiling -----------------------------------------------------------------


def run_memory_profile(fn: Callable[[], Any], *, snapshot_path: str | Path, max_entries: int = 1_000_000) -> int:
    """Profile ``fn``'s CUDA memory, write a snapshot, return peak bytes; see ``memory_profiling.profile_memory``."""
    from cs336_systems.memory_profiling import profile_memory

    return profile_memory(fn, snapshot_path=snapshot_path, max_entries=max_entries)


# -- §1.4 mixed_precision_accumulation, §1.5 benchmarking_mixed_precision, §1.6 gradient_checkpointing ----


def run_accumulate(value: float, steps: int, *, accumulator_dtype: torch.dtype, addend_dtype: torch.dtype) -> torch.Tensor:
    """Add ``value`` ``steps`` times in the dtypes given; see ``mixed_precision_accumulation.accumulate``."""
    from cs336_systems.mixed_precision_accumulation import accumulate

    return accumulate(value, steps, accumulator_dtype=accumulator_dtype, addend_dtype=addend_dtype)


def run_accumulation_table(value: float = 0.01, steps: int = 1000) -> list[dict[str, Any]]:
    """The table of accumulation results; see ``mixed_precision_accumulation.accumulation_table``."""
    from cs336_systems.mixed_precision_accumulation import accumulation_table

    return accumulation_table(value, steps)


def run_autocast_dtypes(dtype: torch.dtype, device: str | torch.device = "cpu") -> dict[str, str]:
    """Dtypes of a ToyModel step under autocast; see ``benchmarking_mixed_precision.autocast_dtypes``."""
    from cs336_systems.benchmarking_mixed_precision import autocast_dtypes

    return autocast_dtypes(dtype, device)


def run_compare_precisions(model_size: str, *, context_length: int, mode: str, warmup_steps: int, measure_steps: int,
                           device: str | torch.device, batch_size: int = 4,
                           model_overrides: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """benchmark_model in fp32 then bf16 autocast; see ``benchmarking_mixed_precision.compare_precisions``."""
    from cs336_systems.benchmarking_mixed_precision import compare_precisions

    return compare_precisions(model_size, context_length=context_length, mode=mode, warmup_steps=warmup_steps,
                              measure_steps=measure_steps, device=device, batch_size=batch_size,
                              model_overrides=model_overrides)


def run_checkpointed_lm_forward(model: torch.nn.Module, token_ids: torch.Tensor, block_size: int) -> torch.Tensor:
    """The LM's forward with layers checkpointed in groups; see ``gradient_checkpointing.checkpointed_lm_forward``."""
    from cs336_systems.gradient_checkpointing import checkpointed_lm_forward

    return checkpointed_lm_forward(model, token_ids, block_size)


def run_peak_memory_by_block_size(model_size: str, *, block_sizes: list[int], context_length: int,
                                  device: str | torch.device, batch_size: int = 4,
                                  model_overrides: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Peak CUDA memory per checkpoint block size; see ``gradient_checkpointing.peak_memory_by_block_size``."""
    from cs336_systems.gradient_checkpointing import peak_memory_by_block_size

    return peak_memory_by_block_size(model_size, block_sizes=block_sizes, context_length=context_length,
                                     device=device, batch_size=batch_size, model_overrides=model_overrides)


# -- §2.1 pytorch_attention and §2.2 torch_compile -----------------------------------------


def run_attention_sweep(
    *,
    batch_size: int,
    head_dims: list[int],
    seq_lens: list[int],
    device: str | torch.device,
    warmup_steps: int,
    measure_steps: int,
    compiled: bool = False,
    attention_fn: Callable[..., torch.Tensor] | None = None,
) -> list[dict[str, Any]]:
    """Time attention forward and backward over a grid; see ``pytorch_attention.attention_sweep``."""
    from cs336_systems.pytorch_attention import attention_sweep

    return attention_sweep(
        batch_size=batch_size,
        head_dims=head_dims,
        seq_lens=seq_lens,
        device=device,
        warmup_steps=warmup_steps,
        measure_steps=measure_steps,
        compiled=compiled,
        attention_fn=attention_fn,
    )


def get_compiled_attention() -> Callable[..., torch.Tensor]:
    """Return attention compiled with ``torch.compile``; see ``torch_compile.compiled_attention``."""
    from cs336_systems.torch_compile import compiled_attention

    return compiled_attention()


def run_compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """Return ``model`` compiled with ``torch.compile``; see ``torch_compile.compile_model``."""
    from cs336_systems.torch_compile import compile_model

    return compile_model(model)


# -- §2.3–§2.5 FlashAttention-2 ------------------------------------------------------------


def get_flashattention_autograd_function_pytorch() -> type[torch.autograd.Function]:
    """Return your tiled PyTorch FlashAttention-2 ``torch.autograd.Function`` subclass (the class).

    ``.apply(Q, K, V, is_causal=False)`` with Q of shape (batch, n_queries, d) and K, V of shape
    (batch, n_keys, d) returns O with Q's shape and dtype, and saves the logsumexp L of shape
    (batch, n_queries) in float32 for the backward. See ``flash_attention_pytorch``.
    """
    from cs336_systems.flash_attention_pytorch import FlashAttentionPytorch

    return FlashAttentionPytorch


def get_flashattention_autograd_function_triton() -> type[torch.autograd.Function]:
    """Return your Triton FlashAttention-2 ``torch.autograd.Function`` subclass (the class).

    Same contract as the PyTorch one; see ``flash_attention_triton``.
    """
    from cs336_systems.flash_attention_triton import FlashAttentionTriton

    return FlashAttentionTriton


# -- §2.6 flash_benchmarking ---------------------------------------------------------------


def run_flash_benchmark_sweep(
    *,
    seq_lens: list[int],
    head_dims: list[int],
    dtypes: list[torch.dtype],
    device: str | torch.device,
    batch_size: int = 1,
    is_causal: bool = True,
    implementations: dict[str, Callable[..., torch.Tensor]] | None = None,
    bench: Callable[[Callable[[], Any]], float] | None = None,
) -> list[dict[str, Any]]:
    """Compare your Triton FlashAttention-2 with PyTorch attention; see ``flash_benchmarking.flash_benchmark_sweep``."""
    from cs336_systems.flash_benchmarking import flash_benchmark_sweep

    return flash_benchmark_sweep(
        seq_lens=seq_lens,
        head_dims=head_dims,
        dtypes=dtypes,
        device=device,
        batch_size=batch_size,
        is_causal=is_causal,
        implementations=implementations,
        bench=bench,
    )


# --------------------------------------------------------------------------------------
# §3 Parallel training (torch.distributed). Every function here runs on every rank, after
# torch.distributed.init_process_group; each rank calls it with its own model.
# --------------------------------------------------------------------------------------

# §3.1 distributed_communication


def run_time_all_reduce(
    tensor: torch.Tensor,
    *,
    warmup_steps: int,
    measure_steps: int,
    synchronize: Callable[[], None],
    timer: Callable[[], float] = time.perf_counter,
    all_reduce: Callable[[torch.Tensor], Any] | None = None,
) -> list[float]:
    """Time all-reduces of ``tensor`` after untimed warm-up ones; see ``distributed_communication.time_all_reduce``."""
    from cs336_systems.distributed_communication import time_all_reduce

    return time_all_reduce(tensor, warmup_steps=warmup_steps, measure_steps=measure_steps, synchronize=synchronize,
                           timer=timer, all_reduce=all_reduce)


def run_benchmark_all_reduce(size_bytes: int, *, warmup_steps: int, measure_steps: int,
                             device: str | torch.device) -> dict[str, Any]:
    """Time an all-reduce of ``size_bytes`` on every rank; see ``distributed_communication.benchmark_all_reduce``."""
    from cs336_systems.distributed_communication import benchmark_all_reduce

    return benchmark_all_reduce(size_bytes, warmup_steps=warmup_steps, measure_steps=measure_steps, device=device)


def run_all_reduce_report(results: list[dict[str, Any]], plot_path: str | Path) -> str:
    """Plot ``results`` to ``plot_path`` and return their Markdown table; see ``distributed_communication``."""
    from cs336_systems.distributed_communication import markdown_table, plot_results

    plot_results(results, plot_path)
    return markdown_table(results)


def run_distributed_communication_cli(argv: list[str]) -> int:
    """Run the all-reduce benchmark's command line with ``argv``; return its exit status."""
    from cs336_systems.distributed_communication import main

    return main(argv)


# §3.2 naive_ddp


def run_naive_ddp_broadcast_parameters(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers into ``module`` on every rank; see ``naive_ddp.broadcast_parameters``."""
    from cs336_systems.naive_ddp import broadcast_parameters

    broadcast_parameters(module)


def run_naive_ddp_all_reduce_gradients(module: torch.nn.Module) -> None:
    """Average each gradient over the ranks, one all-reduce each; see ``naive_ddp.all_reduce_gradients``."""
    from cs336_systems.naive_ddp import all_reduce_gradients

    all_reduce_gradients(module)


# §3.3 ddp_flat


def run_ddp_flat_all_reduce_gradients(module: torch.nn.Module) -> None:
    """Average all gradients over the ranks with one all-reduce; see ``ddp_flat.all_reduce_flat_gradients``."""
    from cs336_systems.ddp_flat import all_reduce_flat_gradients

    all_reduce_flat_gradients(module)


# §3.4 ddp_overlap_individual (CS336's adapter names of 2026, then of 2025: the same class)


def get_ddp(module: torch.nn.Module) -> torch.nn.Module:
    """Wrap ``module`` in your DDP that all-reduces each gradient during the backward; see ``ddp_overlap_individual``."""
    from cs336_systems.ddp_overlap_individual import DDPIndividualParameters

    return DDPIndividualParameters(module)


def ddp_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Run after ``loss.backward()``, before ``optimizer.step()``: wait for the gradients' all-reduces."""
    ddp_model.finish_gradient_synchronization()


def get_ddp_individual_parameters(module: torch.nn.Module) -> torch.nn.Module:
    """CS336 2025's name for :func:`get_ddp`."""
    return get_ddp(module)


def ddp_individual_parameters_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """CS336 2025's name for :func:`ddp_on_after_backward`."""
    ddp_on_after_backward(ddp_model, optimizer)


# §3.5 ddp_bucketed


def get_ddp_bucketed(module: torch.nn.Module, bucket_size_mb: float | None) -> torch.nn.Module:
    """Wrap ``module`` in your bucketed DDP (buckets of at most ``bucket_size_mb`` MiB; None: one bucket)."""
    from cs336_systems.ddp_bucketed import DDPBucketed

    return DDPBucketed(module, bucket_size_mb)


def ddp_bucketed_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Run after ``loss.backward()``, before ``optimizer.step()``: finish every bucket's all-reduce."""
    ddp_model.finish_gradient_synchronization()


def ddp_bucketed_on_train_batch_start(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Run at the start of every training step, before the forward."""
    ddp_model.on_train_batch_start()


# §3.6 optimizer_state_sharding


def get_sharded_optimizer(params, optimizer_cls: type[torch.optim.Optimizer], **kwargs) -> torch.optim.Optimizer:
    """``optimizer_cls(params, **kwargs)`` with its state sharded across ranks; see ``optimizer_state_sharding``."""
    from cs336_systems.optimizer_state_sharding import ShardedOptimizer

    return ShardedOptimizer(params, optimizer_cls, **kwargs)


# §3.7 fsdp


def get_fsdp(module: torch.nn.Module, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Wrap ``module`` in your FSDP (Linear and Embedding weights sharded); see ``fsdp``."""
    from cs336_systems.fsdp import FSDP

    return FSDP(module, compute_dtype=compute_dtype)


def fsdp_on_after_backward(fsdp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Run after ``loss.backward()``, before ``optimizer.step()``: finish the gradients' communication."""
    fsdp_model.finish_gradient_synchronization()


def fsdp_gather_full_params(fsdp_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{name: full float32 tensor} for every parameter of the wrapped module (call it on every rank)."""
    return fsdp_model.gather_full_params()


# edition 2026 ---------------------------------------------------------------------------
# §3.8 training_step (the training-step board)


def get_training_step(model: torch.nn.Module, optimizer_settings: dict, compute_dtype: torch.dtype) -> Any:
    """Your training step for this rank: an object with ``step(inputs, targets) -> loss`` and ``full_parameters()``.

    Called once on every rank of a ``torch.distributed`` run (2 ranks officially), after
    ``init_process_group``, with the provided ``TransformerLM`` in float32 (the same initial
    weights on every rank, on this rank's device), AdamW's settings (``lr``, ``betas``, ``eps``,
    ``weight_decay``) and the compute dtype (``torch.float32`` or ``torch.bfloat16``). Then:

    - ``step(inputs, targets)``: (rows, seq) token ids of this rank's rows and their next tokens;
      one full training step: forward in ``compute_dtype``, mean cross-entropy, backward, the
      communication that averages the gradients over the ranks, one AdamW update. Returns the
      loss computed by this forward (before the update).
    - ``full_parameters()``: ``{name: whole tensor}`` for every parameter, under the provided
      model's names (every rank calls it at the same point).

    The board times ``step`` itself and refuses a step that fails the gate against one process
    on the whole batch, changes the model, skips the update, never communicates, or stops
    working once the timing starts; see ``training_step.TrainingStep`` and the handout's §3.8.
    """
    from cs336_systems.training_step import TrainingStep

    return TrainingStep(model, optimizer_settings, compute_dtype)
# end edition 2026 -----------------------------------------------------------------------


# edition 2026 ---------------------------------------------------------------------------
# §1.7 nested_checkpointing


def run_nested_checkpoint_plan(num_layers: int) -> int | list:
    """A nested checkpointing plan for ``num_layers`` layers; see ``nested_checkpointing.nested_checkpoint_plan``."""
    from cs336_systems.nested_checkpointing import nested_checkpoint_plan

    return nested_checkpoint_plan(num_layers)
# end edition 2026 -----------------------------------------------------------------------
