"""Hidden tests of §3.3 ddp_flat: the provided LM, AdamW, a chain in float64, and one all-reduce on 3 ranks
of a model in bfloat16 (the flat buffer sent, and the gradients kept, in the model's dtype); on one GPU
over NCCL, the flat buffer on the gradients' device."""

from __future__ import annotations

import pytest
import torch

from harness.ddp_checks import all_reduces, gradient_numels, run_ddp


@pytest.mark.parametrize(("model", "world_size", "optimizer", "lr", "dtype"),
                         [("lm", 2, "AdamW", 1e-2, "float32"), ("chain", 3, "SGD", 0.05, "float64")])
def test_ddp_flat_matches_single_process_training(adapters, model, world_size, optimizer, lr, dtype):
    run_ddp(adapters, "flat", model, world_size, optimizer=optimizer, lr=lr, dtype=getattr(torch, dtype))


def test_ddp_flat_one_all_reduce_on_three_ranks(adapters):
    ranks = run_ddp(adapters, "flat", "tied", 3, steps=2, dtype=torch.bfloat16)  # values and dtypes in bfloat16 too
    total = sum(gradient_numels("tied"))
    for rank, result in enumerate(ranks):
        for step in range(2):
            got = all_reduces(result["events"], ("backward_end", step), ("synced", step))
            assert got == [total], f"rank {rank}, step {step}: expected one all-reduce of {total} elements; got {got}"


@pytest.mark.gpu
def test_ddp_flat_on_one_gpu_with_nccl(adapters):
    # A world of one rank over NCCL, the model on cuda:0. NCCL communicates CUDA tensors only,
    # even with one rank: a flat buffer allocated on the default device (torch.empty(n, dtype=...)
    # is on the CPU) instead of the gradients' fails here, where gloo, which takes CPU tensors
    # too, never shows it.
    run_ddp(adapters, "flat", "lm", 1, steps=2, backend="nccl")
