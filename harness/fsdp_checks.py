"""Judge FSDP: full parameters against one process, the shards held, the gathers' window, and GPU memory.

Read by tests/test_fsdp.py and its hidden twin. ``run_fsdp`` trains on the ranks (executor/probes/fsdp.py)
and compares them with the whole-batch run (harness/parallel_reference.py); ``check_fsdp_communication``
reads their event logs; ``check_fsdp_memory`` measures GPU memory over NCCL. Failures raise AssertionError.
"""

from __future__ import annotations

import torch

from executor.probes import parallel_models as models, run_probe
from harness import parallel_reference as reference
from harness.parallel_runs import (FP32_TOLERANCE, RUN_TIMEOUT_S, assert_every_handle_waited, assert_state_close,
                                   batch, describe, ranks_of)


GATHERS = ("all_gather_into_tensor", "all_gather")
REDUCE_SCATTERS = ("reduce_scatter_tensor", "reduce_scatter")


FSDP_TOLERANCE = {None: FP32_TOLERANCE, torch.float16: {"atol": 2e-3, "rtol": 2e-3},
                  torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def run_fsdp(adapters, model: str, world_size: int, *, steps: int = 3, optimizer: str = "SGD", lr: float = 0.1,
             compute_dtype: torch.dtype | None = None, seed: int = 0, rows: int = 6,
             backend: str = "gloo", keyword_input: bool = False) -> list[dict]:
    """Train ``model`` with FSDP on ``world_size`` ranks and check it against one process.

    ``keyword_input``: the wrapper is called with the input as a keyword argument
    (``fsdp(tokens=inputs)``), which its forward must pass on to the module as any ``nn.Module``
    call does.

    Checks: every asynchronous collective a step launched (a prefetched gather, a replicated
    parameter's all-reduce) was waited on before that step's synchronisation returned (from the
    log, as ``assert_every_handle_waited``); each Linear/Embedding weight is held as a float32
    shard of at most a 1/world_size share (rounded up to whole rows), other parameters whole;
    gradients after the first sync are float32 and shaped like their parameters; the full
    parameters after every step are float32 (as returned, not cast by the probe) and equal the
    whole-batch run's (with the same casts to ``compute_dtype``). Returns the ranks' results.
    """
    init = reference.initial_state(model, seed)
    inputs, targets = batch(model, rows, seed + 1)
    settings = dict(model=model, init_state=init, inputs=inputs, targets=targets, steps=steps, optimizer=optimizer,
                    lr=lr, compute_dtype=compute_dtype, keyword_input=keyword_input)
    context = (f"FSDP of the {model!r} model on {world_size} ranks, {rows // world_size} rows each, "
               f"{optimizer}(lr={lr}), compute_dtype={compute_dtype}"
               + (", called with the input as a keyword argument (fsdp(tokens=inputs))" if keyword_input else ""))
    context += f", {backend}"
    ranks = ranks_of(run_probe(adapters, "fsdp.train", world_size, settings, timeout_s=RUN_TIMEOUT_S,
                               backend=backend), context)
    assert_every_handle_waited(ranks, steps, context)
    truth = reference.train(model, init, inputs, targets, steps=steps, optimizer=optimizer, lr=lr,
                            compute_dtype=compute_dtype)
    full_model = reference.build(model)
    sharded = reference._sharded_weights(full_model)
    shapes = {name: list(p.shape) for name, p in full_model.named_parameters()}
    for rank, result in enumerate(ranks):
        value, where = result["value"], f"{context}; rank {rank}"
        assert set(value["shards"]) == set(shapes), (
            f"fsdp.module.named_parameters() must keep the wrapped module's names {sorted(shapes)}; got "
            f"{sorted(value['shards'])} ({where})")
        for name, (shape, dtype) in value["shards"].items():
            full = shapes[name]
            assert dtype == "float32", (
                f"{name} is held in {dtype}; the parameters the optimizer updates (the master weights) must stay "
                f"float32, whatever the compute dtype ({where})")
            numel = 1
            for size in shape:
                numel *= size
            if name in sharded:
                rows, per_row = full[0], (numel_of(full) // full[0])
                limit = max(-(-numel_of(full) // world_size), -(-rows // world_size) * per_row)
                assert numel <= limit, (
                    f"{name} (full shape {full}) is held as {shape} on this rank: a shard holds at most "
                    f"{limit} elements on {world_size} ranks ({where})")
            else:
                assert shape == full, f"{name} is not a Linear/Embedding weight: keep it whole ({full}); got {shape} ({where})"
        for name, grad in value["grads"].items():
            assert grad is not None, f"after the first sync, {name}.grad is None ({where})"
            assert grad[1] == "float32" and grad[0] == value["shards"][name][0], (
                f"after the first sync, {name}.grad is {grad[1]} of shape {grad[0]}; expected float32 of the "
                f"parameter's shape {value['shards'][name][0]} ({where})")
        if model == "fsdp_chain":
            check_saved_full_weights_freed(result["events"], {n: numel_of(shapes[n]) for n in sharded}, steps, where)
        for step, (got, expected) in enumerate(zip(value["fulls"], truth["states"])):
            other = {name: str(t.dtype).removeprefix("torch.") for name, t in got.items()
                     if isinstance(t, torch.Tensor) and t.dtype != torch.float32}
            assert not other, (
                f"after step {step}, fsdp_gather_full_params returned {other}: it returns full float32 tensors, the "
                f"master weights, whatever the compute dtype (gather the float32 shards, not copies cast for the "
                f"forward) ({where})")
            assert_state_close(got, {k: v for k, v in expected.items() if k in shapes},
                               what=f"after step {step}, the full parameter", context=where,
                               tolerance=FSDP_TOLERANCE[compute_dtype])
    return ranks


MAX_SAVED_FULL_WEIGHTS = 1
"""Full weights autograd may still hold, with their memory, when the backward begins (the last
layer's, say, kept for its backward at once); the reference holds none."""


def check_saved_full_weights_freed(events: list[tuple], numels: dict[str, int], steps: int, where: str) -> None:
    """The CPU's view of FSDP's memory: full weights that autograd saved are released after their forward.

    A layer's full weight, saved by autograd for the backward, stays allocated unless its storage
    is released after the forward (and gathered again for the backward): dropping one's own
    reference frees nothing. The probe reports each tensor still saved at ("backward_begin", s)
    with the bytes its storage holds; a saved tensor with a sharded weight's number of elements
    ('fsdp_chain' makes them differ from every activation's) that still holds bytes is a full
    weight kept alive. The GPU test measures the same in bytes of device memory.
    """
    by_numel = {numel: name for name, numel in numels.items()}
    for step in range(steps):
        kept = sorted({by_numel[numel_of(e[2])] for e in events
                       if e[0] == "saved" and e[1] == step and e[4] > 0 and numel_of(e[2]) in by_numel})
        assert len(kept) <= MAX_SAVED_FULL_WEIGHTS, (
            f"{where}: when step {step}'s backward began, autograd still held the full weights of {kept} with their "
            f"memory (at most {MAX_SAVED_FULL_WEIGHTS} may be): a full weight saved for the backward stays allocated "
            f"until its storage is released (e.g. tensor.untyped_storage().resize_(0) after the layer's forward, "
            f"and gathered into it again before its backward); dropping your own reference to it frees nothing")


def numel_of(shape: list[int]) -> int:
    numel = 1
    for size in shape:
        numel *= size
    return numel


def phase(events: list[tuple], step: int, start: str, end: str) -> list[tuple]:
    """Step ``step``'s events from marker (start, step) to marker (end, step)."""
    return events[events.index((start, step)):events.index((end, step)) + 1]


def check_fsdp_communication(ranks: list[dict], steps: int, compute_dtype: torch.dtype | None) -> None:
    """The gathers and reduce-scatters of ``fsdp_chain``'s sharded layers: sizes, dtype, and the prefetch window.

    Forward: each sharded layer's weight is gathered (in the compute dtype) before its forward
    ends, and the k-th layer's gather starts only after the (k-2)-th layer's forward ended.
    Backward: each Linear weight is gathered again, the k-th layer's only after the backward
    reached the output of layer k+1 (layer k+2's backward is done); each sharded weight's
    gradient is reduce-scattered, never all-reduced.
    """
    order = list(models.FSDP_LAYERS)
    dtype = str(compute_dtype or torch.float32).removeprefix("torch.")
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(steps):
            where = f"rank {rank}, step {step}"
            forward = phase(events, step, "forward_begin", "backward_begin")
            backward = phase(events, step, "backward_begin", "synced")
            shown = f"; events of the step:\n  {describe(phase(events, step, 'forward_begin', 'synced'))}"
            for k, name in enumerate(order):
                gathers = [i for i, e in enumerate(forward) if e[0] in GATHERS and models.fsdp_layer_of(e[1]) == name]
                end = forward.index(("layer_end", name))
                assert gathers and gathers[0] < end, f"{where}: {name}'s weight was not all-gathered for its forward{shown}"
                for i in gathers:
                    assert forward[i][2] == dtype, (
                        f"{where}: {name}'s weight was gathered in {forward[i][2]}; cast the shard to {dtype} before "
                        f"the all-gather{shown}")
                    if k >= 2:
                        assert i > forward.index(("layer_end", order[k - 2])), (
                            f"{where}: {name}'s gather started before {order[k - 2]} (two sharded layers earlier) "
                            f"finished its forward: prefetch at most two layers ahead{shown}")
                back = [i for i, e in enumerate(backward) if e[0] in GATHERS and models.fsdp_layer_of(e[1]) == name]
                if name != "embed":  # an embedding's backward needs no weight values
                    assert back, (f"{where}: {name}'s weight was not gathered again for the backward: free the "
                                  f"full weight after the forward and gather it again when the backward needs it{shown}")
                if k + 2 < len(order):
                    reached = backward.index(("backward_reached", order[k + 1]))
                    early = [i for i in back if i < reached]
                    assert not early, (f"{where}: {name}'s backward gather started before the backward of "
                                       f"{order[k + 2]} (two layers later) finished: at most two layers ahead{shown}")
                scattered = [e for e in backward if e[0] in REDUCE_SCATTERS and models.fsdp_layer_of(e[1]) == name]
                reduced = [e for e in backward if e[0] == "all_reduce" and models.fsdp_layer_of(e[1]) == name]
                assert scattered and not reduced, (
                    f"{where}: {name}'s gradient must be reduce-scattered (each rank receives its shard's sum), not "
                    f"all-reduced{shown}")


MEMORY_SETTINGS = {"width": 2048, "layers": 16, "rows": 16}
"""The stack ``fsdp.memory`` trains: 16 weights of 16 MiB in float32, activations of 128 KiB a layer."""
MEMORY_SLACK = 16 * 2**20
"""Allowance (bytes) for the allocator's rounding, the inputs and small buffers."""


def check_fsdp_memory(adapters, world_size: int = 2) -> None:
    """On ``world_size`` GPUs over NCCL: FSDP holds only shards between steps, and frees each full weight after use.

    Between steps a rank may hold its shards (1/world_size of the weights) plus two layers'
    worth; during the forward, the full weights alive at once may take at most six layers' worth
    (the layer running, two prefetched, and room for gather buffers) above the saved activations.
    An FSDP whose freed weight is still referenced (for example saved by autograd for the
    backward) holds every layer's full weight by the end of the forward.
    """
    width, layers = MEMORY_SETTINGS["width"], MEMORY_SETTINGS["layers"]
    context = f"get_fsdp of {layers} Linear({width}, {width}) layers (float32), {world_size} ranks over NCCL"
    ranks = ranks_of(run_probe(adapters, "fsdp.memory", world_size, dict(MEMORY_SETTINGS), timeout_s=90.0), context)
    for rank, result in enumerate(ranks):
        judge_fsdp_memory(result["value"], world_size, f"{context}; rank {rank}")


def fsdp_memory_limits(world_size: int) -> dict[str, int]:
    """Bytes: one ``layer``'s weight, the ``shards``, ``activations`` saved, and the ``held`` and ``forward_peak`` limits."""
    width, layers, rows = MEMORY_SETTINGS["width"], MEMORY_SETTINGS["layers"], MEMORY_SETTINGS["rows"]
    layer = width * width * 4
    activations = 2 * layers * rows * width * 4
    return {"layer": layer, "shards": layers * layer // world_size, "activations": activations,
            "held": layers * layer // world_size + 2 * layer + MEMORY_SLACK,
            "forward_peak": 6 * layer + activations + MEMORY_SLACK}


def judge_fsdp_memory(value: dict, world_size: int, where: str) -> None:
    """AssertionError unless ``value`` (bytes: held, forward_peak) stays within ``fsdp_memory_limits``."""
    limits, mib = fsdp_memory_limits(world_size), 2**20
    layer, held_limit, forward_limit = limits["layer"], limits["held"], limits["forward_peak"]
    layers, activations = MEMORY_SETTINGS["layers"], limits["activations"]
    assert value["held"] <= held_limit, (
        f"{where}: after get_fsdp, the rank holds {value['held'] / mib:.0f} MiB of GPU memory; its shards are "
        f"{layers * layer // world_size / mib:.0f} MiB (the full model {layers * layer / mib:.0f} MiB), so at most "
        f"{held_limit / mib:.0f} MiB is allowed: keep only the shard of each weight, and release the full one")
    assert value["forward_peak"] <= forward_limit, (
        f"{where}: the forward's allocations peaked {value['forward_peak'] / mib:.0f} MiB above the step's start; "
        f"one layer's full weight is {layer / mib:.0f} MiB and the saved activations {activations / mib:.1f} MiB, "
        f"so at most {forward_limit / mib:.0f} MiB is allowed (the layer running, two prefetched, buffers). Free "
        "each full weight after its layer: a tensor autograd saved for the backward stays allocated until "
        "the backward, so release its storage (untyped_storage().resize_(0)) and gather it again for the "
        "backward")
