"""Visible tests of §3.7 fsdp: shards, values against one process, mixed precision, and when weights travel.

The 'fsdp_chain' model (an embedding, an RMSNorm and four Linear layers of the provided
model's classes) logs when each layer's forward begins and ends and when the backward reaches
it; every gather and reduce-scatter your FSDP makes is logged with its size and dtype. On two
GPUs, memory is measured on a stack of big Linear layers (harness/fsdp_checks.py,
``check_fsdp_memory``).
"""

from __future__ import annotations

import pytest
import torch

from harness.fsdp_checks import check_fsdp_communication, check_fsdp_memory, run_fsdp


@pytest.mark.parametrize(("world_size", "compute_dtype"), [(2, None), (3, None), (2, torch.float16)],
                         ids=["2-ranks-fp32", "3-ranks-fp32", "2-ranks-fp16"])
def test_fsdp_matches_single_process_training(adapters, world_size, compute_dtype):
    run_fsdp(adapters, "fsdp_chain", world_size, compute_dtype=compute_dtype)


@pytest.mark.parametrize("compute_dtype", [None, torch.float16], ids=["fp32", "fp16"])
def test_fsdp_gathers_within_two_layers_and_reduce_scatters(adapters, compute_dtype):
    ranks = run_fsdp(adapters, "fsdp_chain", 3, steps=2, compute_dtype=compute_dtype)
    check_fsdp_communication(ranks, 2, compute_dtype)


@pytest.mark.gpu(count=2)
@pytest.mark.parametrize("compute_dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_fsdp_on_two_gpus_with_nccl(adapters, compute_dtype):
    run_fsdp(adapters, "lm", 2, compute_dtype=compute_dtype, backend="nccl")
    ranks = run_fsdp(adapters, "fsdp_chain", 2, steps=2, compute_dtype=compute_dtype, backend="nccl")
    check_fsdp_communication(ranks, 2, compute_dtype)


@pytest.mark.gpu(count=2)
def test_fsdp_memory_on_two_gpus(adapters):
    check_fsdp_memory(adapters)
