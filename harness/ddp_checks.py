"""Judge DDP (naive, flat, overlapping individual, bucketed) against one process, and its all-reduces.

Read by tests/test_{naive_ddp,ddp_flat,ddp_overlap_individual,ddp_bucketed}.py and their hidden twins.
``run_ddp`` trains on the ranks (executor/probes/ddp.py) and compares every rank with the whole-batch
run (harness/parallel_reference.py); the other checks read the ranks' event logs (what was all-reduced,
when, when its handle was waited on) or, on GPUs, the profile's kernels. Failures raise AssertionError.
"""

from __future__ import annotations

from collections import Counter

import torch

from executor.probes import parallel_models as models, run_probe
from harness import parallel_reference as reference
from harness.parallel_runs import (COLLECTIVE_NAMES, DDP_TOLERANCE, RUN_TIMEOUT_S, assert_dtypes_kept,
                                   assert_every_handle_waited, assert_optimizer_state_close, assert_state_close,
                                   batch, describe, ranks_of, state_in_dtype, step_events)


def assert_sent_in_dtype(events: list[tuple], steps: int, dtype: torch.dtype, context: str) -> None:
    """Every collective logged between each step's ("backward_begin", s) and ("synced", s) went out in ``dtype``.

    The gradients of a model in ``dtype`` are in ``dtype``: a buffer of another dtype (the
    default float32, or float64 "for accuracy") sends other bytes than the contract's, and
    rounds the gradients (or hides rounding a run in ``dtype`` has).
    """
    name = str(dtype).removeprefix("torch.")
    for step in range(steps):
        window = events[events.index(("backward_begin", step)):events.index(("synced", step))]
        other = [f"{e[0]} of {e[1]} {e[2]} elements" for e in window if e[0] in COLLECTIVE_NAMES and e[2] != name]
        assert not other, (
            f"{context}, step {step}: the gradients are {name}, but the step sent {other}: communicate each "
            f"gradient (or each flat buffer of gradients) in the gradients' own dtype")


NCCL_NOTE = (" (one GPU per rank, the model on it: NCCL communicates CUDA tensors only, so every buffer a "
             "collective sends must be on the gradients' device, not the default device, the CPU)")
"""What a run over NCCL adds to its context: why a buffer that works on gloo fails there."""


def run_ddp(adapters, variant: str, model: str, world_size: int, *, steps: int = 3, optimizer: str = "SGD",
            lr: float = 0.1, bucket_size_mb: float | None = None, api: str = "2026", seed: int = 0,
            rows: int = 6, backend: str = "gloo", set_to_none: bool = True,
            keyword_input: bool = False, dtype: torch.dtype = torch.float32) -> list[dict]:
    """Train ``model`` with DDP ``variant`` on ``world_size`` ranks and check it against one process.

    ``set_to_none``: how the training loop clears gradients before each step
    (``optimizer.zero_grad(set_to_none=...)``); with False the same ``.grad`` tensors live on
    from step to step, so a gradient averaged twice shows in the values. ``keyword_input``: the
    wrapper is called with the input as a keyword argument (``ddp(x=inputs)``), which a wrapper's
    forward must pass on to the module as any ``nn.Module`` call does. ``dtype``: the whole model
    (parameters, buffers, floating inputs) is in that dtype on every rank and in the truth;
    a float64 model starts from values float32 cannot hold (``state_in_dtype``).

    Checks: right after wrapping every rank holds rank 0's parameters and buffers, bit for bit
    (not for "flat", whose ranks start equal); each step's gradient collectives go out in
    ``dtype``; after the first step's synchronisation every rank's gradients are in ``dtype`` and
    equal the whole batch's; after ``steps`` steps every rank's parameters and buffers (in
    ``dtype``) and optimizer state equal the whole-batch run's, within ``DDP_TOLERANCE[dtype]``.
    Returns the ranks' results ({"value", "events"}) for further checks.
    """
    name = str(dtype).removeprefix("torch.")
    init = reference.initial_state(model, seed)
    if dtype != torch.float32:
        init = state_in_dtype(init, dtype, seed)
    inputs, targets = batch(model, rows, seed + 1)
    settings = dict(variant=variant, model=model, init_state=init, inputs=inputs, targets=targets, steps=steps,
                    optimizer=optimizer, lr=lr, bucket_size_mb=bucket_size_mb, api=api, set_to_none=set_to_none,
                    keyword_input=keyword_input, dtype=None if dtype == torch.float32 else name)
    context = (f"{variant} DDP of the {model!r} model in {name} on {world_size} ranks, {rows // world_size} rows "
               f"each, {optimizer}(lr={lr})" + (f", bucket_size_mb={bucket_size_mb}" if variant == "bucketed" else "")
               + ("" if set_to_none else ", gradients zeroed in place (zero_grad(set_to_none=False))")
               + (", called as ddp(x=inputs) (a keyword argument)" if keyword_input else ""))
    context += f", {backend}" + (NCCL_NOTE if backend == "nccl" else "")
    ranks = ranks_of(run_probe(adapters, "ddp.train", world_size, settings, timeout_s=RUN_TIMEOUT_S, backend=backend),
                     context)
    assert_every_handle_waited(ranks, steps, context)
    truth = reference.train(model, init, inputs, targets, steps=steps, optimizer=optimizer, lr=lr,
                            dtype=None if dtype == torch.float32 else dtype)
    tolerance = DDP_TOLERANCE[dtype]
    for rank, result in enumerate(ranks):
        where = f"{context}; rank {rank}"
        value = result["value"]
        assert_sent_in_dtype(result["events"], steps, dtype, where)
        if variant != "flat":
            assert_dtypes_kept(value["after_wrap"], dtype, what="right after wrapping, every parameter and buffer",
                               context=where)
            assert_state_close(value["after_wrap"], init, what="right after wrapping, the parameter or buffer",
                               context=where + " (every rank must start from rank 0's values: broadcast them)",
                               exact=True)
        assert_dtypes_kept(value["grads"], dtype, what="after the first backward and sync, every gradient",
                           context=where)
        assert_state_close(value["grads"], truth["grads"], what="after the first backward and sync, the gradient",
                           context=where, tolerance=tolerance)
        assert_dtypes_kept(value["final"], dtype, what=f"after {steps} steps, every parameter and buffer",
                           context=where)
        assert_state_close(value["final"], truth["states"][-1], what=f"after {steps} steps, the parameter",
                           context=where, tolerance=tolerance)
        assert_optimizer_state_close(value["optimizer_state"], truth["optimizer_state"],
                                     what=f"after {steps} steps, the optimizer's state", context=where)
    return ranks


def gradient_numels(model: str) -> list[int]:
    """Element counts of the model's parameters that get a gradient, in ``parameters()`` order."""
    net = reference.build(model)
    init = reference.initial_state(model)
    inputs, targets = batch(model, 2, 0)
    net.load_state_dict(init)
    models.loss_of(model, net(inputs), targets).backward()
    return [p.numel() for p in net.parameters() if p.grad is not None]


def all_reduces(events: list[tuple], start: tuple, end: tuple) -> list[int]:
    """Element counts of the all-reduces logged between markers ``start`` and ``end``."""
    window = events[events.index(start):events.index(end)]
    return [e[1] for e in window if e[0] == "all_reduce"]


def assert_same_numels(got: list[int], expected: list[int], what: str) -> None:
    assert Counter(got) == Counter(expected), (
        f"{what}: expected all-reduces of {sorted(expected)} elements (one per entry), logged {sorted(got)}")


def launch_position(events: list[tuple], numel: int, step: int) -> int:
    """Index in ``events`` of step ``step``'s all-reduce of ``numel`` elements; AssertionError if none."""
    start = events.index(("step", step))
    for i in range(start, len(events)):
        if events[i][0] == "all_reduce" and events[i][1] == numel:
            return i
    raise AssertionError(f"no all-reduce of {numel} elements in step {step}; events: {events[start:]}")


def waits_of(events: list[tuple], launch: int) -> list[int]:
    """Indices in ``events`` of the waits on the handle of the collective logged at index ``launch``."""
    return [i for i, e in enumerate(events) if e[0] == "wait" and e[3] == launch]


def assert_not_waited_before(events: list[tuple], launch: int, marker: tuple, what: str, step: int) -> None:
    """The handle of the collective logged at ``launch`` is not waited on before ``marker`` (searched from ``launch``).

    An all-reduce launched from a hook and waited on at once blocks the backward until every
    rank has sent its share: nothing overlaps, whatever the launch order says.
    """
    reached = events.index(marker, launch)
    early = [i for i in waits_of(events, launch) if i < reached]
    assert not early, (
        f"{what}: its handle was waited on (work.wait()) before the backward reached {marker}: the backward stood "
        f"still until the all-reduce finished, so nothing overlapped. Keep the handle and wait for it only in "
        f"finish_gradient_synchronization (ddp_on_after_backward); events of step {step}:\n  "
        f"{describe(step_events(events, step))}")


def check_overlap(ranks: list[dict], model: str, steps: int) -> None:
    """Each trainable layer's all-reduce of 'chain' or 'frozen_chain' is launched, and left running, during the backward.

    For every step and rank: one asynchronous all-reduce per trainable weight (none for the
    frozen one); layer i's (i >= 1) launched before the backward reaches layer i - 1, and its
    handle not waited on before then either.
    """
    frozen = models.FrozenChain.FROZEN_LAYER if model == "frozen_chain" else None
    numels = [a * b for a, b in zip(models.CHAIN_WIDTHS, models.CHAIN_WIDTHS[1:])]
    trainable = [layer for layer in range(len(numels)) if layer != frozen]
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(steps):
            where = f"rank {rank}, step {step} of the {model!r} model"
            got = all_reduces(events, ("backward_begin", step), ("synced", step))
            assert_same_numels(got, [numels[layer] for layer in trainable], where + (
                f" (layer {frozen}'s weight of {numels[frozen]} elements is frozen: it has no gradient to all-reduce)"
                if frozen is not None else ""))
            start = events.index(("step", step))
            for layer in (layer for layer in trainable if layer >= 1):
                launched = launch_position(events, numels[layer], step)
                reached = ("backward_reached", layer - 1)
                assert launched < events.index(reached, start), (
                    f"{where}: layer {layer}'s gradient all-reduce ({numels[layer]} elements) must be launched as "
                    f"soon as its gradient is ready, before the backward reaches layer {layer - 1}; events:\n  "
                    f"{describe(step_events(events, step))}")
                assert events[launched][3], (
                    f"{where}: launch the all-reduces with async_op=True, or each one blocks the backward until every "
                    f"rank has sent its gradient; events:\n  {describe(step_events(events, step))}")
                assert_not_waited_before(events, launched, reached,
                                         f"{where}: layer {layer}'s all-reduce ({numels[layer]} elements)", step)


def assert_handles_released(ranks: list[dict], steps: int, context: str) -> None:
    """After step s's synchronisation, no rank still holds a handle launched before step s - 1.

    A wrapper may keep the current step's handles (or the previous step's) until the next step;
    one that keeps every handle in a list it never clears grows every step, and waits and
    divides old gradients again in every later step.
    """
    for rank, result in enumerate(ranks):
        events = result["events"]
        starts = [events.index(("step", s)) for s in range(steps)]
        for s in range(steps):
            marker = next(e for e in events if e[0] == "live_handles" and e[1] == s)
            old = [i for i in marker[2] if s >= 2 and i < starts[s - 1]]
            assert not old, (
                f"{context}; rank {rank}: after step {s}'s synchronisation the wrapper still holds "
                f"{len(old)} handles of all-reduces launched in earlier steps (before step {s - 1}); its state grows "
                f"every step. Forget the handles once they are waited on (clear the list in "
                f"finish_gradient_synchronization), or the next step waits for them, and divides their gradients, "
                f"again; live handles after each step: "
                f"{[(e[1], len(e[2])) for e in events if e[0] == 'live_handles']}")


FROZEN_CHAIN_NUMELS = {4: 55, 3: 99, 1: 168, 0: 120}
"""The trainable weights of 'frozen_chain' (layer: elements), last layer first; layer 2's 126 are frozen."""


def check_buckets_in_dtype(adapters, dtype: torch.dtype, bucket_bytes: int, buckets: list[int],
                           world_size: int = 2, steps: int = 2) -> None:
    """Bucketed DDP of 'chain' with parameters in ``dtype``: buckets sized in bytes of that dtype, sent in it.

    ``bucket_size_mb`` is a size (MiB), so a bucket holds half as many float64 elements as float32
    ones: the all-reduces must be exactly ``buckets`` (elements). ``run_ddp`` in ``dtype`` checks
    the rest: each bucket sent in ``dtype`` (a bucket flattened into float32 sends other bytes
    than the contract's), and the gradients and parameters kept in ``dtype`` and equal to the
    whole batch's within that dtype's tolerance.
    """
    name = str(dtype).removeprefix("torch.")
    numels = [a * b for a, b in zip(models.CHAIN_WIDTHS, models.CHAIN_WIDTHS[1:])][::-1]
    ranks = run_ddp(adapters, "bucketed", "chain", world_size, steps=steps, bucket_size_mb=bucket_bytes / 2**20,
                    dtype=dtype)
    context = (f"bucketed DDP of the 'chain' model in {name} on {world_size} ranks, bucket_size_mb = {bucket_bytes} "
               f"bytes / 2**20 (weights of {numels} {name} elements of "
               f"{torch.tensor([], dtype=dtype).element_size()} bytes, last layer first)")
    for rank, result in enumerate(ranks):
        for step in range(steps):
            got = all_reduces(result["events"], ("backward_begin", step), ("synced", step))
            assert_same_numels(got, buckets, f"{context}; rank {rank}, step {step}")


def check_frozen_weight_left_out_of_buckets(adapters, world_size: int, bucket_bytes: int, buckets: list[int],
                                            steps: int = 2) -> None:
    """Bucketed DDP of 'frozen_chain': exactly ``buckets`` (elements) all-reduced, the first one during the backward.

    The frozen weight belongs to no bucket: it takes no room there, so the buckets are those of
    the four trainable weights alone, and the last layers' bucket fills (and is launched, and
    left running) before the backward reaches the frozen layer.
    """
    ranks = run_ddp(adapters, "bucketed", "frozen_chain", world_size, bucket_size_mb=bucket_bytes / 2**20, steps=steps)
    first = buckets[0]
    lowest = min(layer for layer in FROZEN_CHAIN_NUMELS if sum(
        n for l, n in FROZEN_CHAIN_NUMELS.items() if l >= layer) == first)
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(steps):
            where = (f"rank {rank}, step {step}, bucket_size_mb = {bucket_bytes} bytes / 2**20, the 'frozen_chain' model "
                     f"(trainable weights of 55, 99, 168 and 120 elements, last layer first; layer 2's 126 elements "
                     f"are frozen and belong to no bucket)")
            got = all_reduces(events, ("backward_begin", step), ("synced", step))
            assert_same_numels(got, buckets, where)
            launched = launch_position(events, first, step)
            marker = ("backward_reached", lowest - 1)
            assert launched < events.index(marker, events.index(("step", step))), (
                f"{where}: the bucket of the last layers ({first} elements) is full once layer {lowest}'s gradient "
                f"exists: launch it then, before the backward reaches layer {lowest - 1} (a frozen weight never "
                f"gets a gradient: a bucket that waits for it fills only at the end); events:\n  "
                f"{describe(step_events(events, step))}")
            assert_not_waited_before(events, launched, marker, f"{where}: the bucket of {first} elements", step)


def check_state_stays_bounded(adapters, variant: str, *, set_to_none: bool, world_size: int = 2, steps: int = 4,
                              bucket_size_mb: float | None = None) -> None:
    """Train ``steps`` steps of the 'frozen' model (SGD) clearing gradients with ``set_to_none``; values and handles.

    With ``set_to_none=False`` the gradients are zeroed in place, so a wrapper that waits for,
    and divides, a previous step's gradients again ends with the wrong parameters; with either
    mode, the handles of earlier steps must be released (``assert_handles_released``).
    """
    ranks = run_ddp(adapters, variant, "frozen", world_size, steps=steps, bucket_size_mb=bucket_size_mb,
                    set_to_none=set_to_none)
    assert_handles_released(ranks, steps, f"{variant} DDP of the 'frozen' model, {steps} steps, "
                                          f"zero_grad(set_to_none={set_to_none})")


PROFILE_SETTINGS = {"width": 2048, "layers": 12, "rows": 256}
"""The stack ``ddp_profile`` trains: 12 gradients of 16 MiB, each worth an all-reduce of its own."""


def check_overlap_in_gpu_profile(adapters, world_size: int = 2, seed: int = 0) -> None:
    """On ``world_size`` GPUs over NCCL, some all-reduce kernel runs before the backward's last kernel ends.

    The probe profiles one step of the submission's ``get_ddp`` (executor/probes/ddp_profile.py).
    An all-reduce launched from a gradient hook is queued while the backward is still being
    computed, so its NCCL kernel starts while later backward kernels still run; all-reduces
    launched after ``loss.backward()`` returned wait for every backward kernel queued before them.
    """
    settings = dict(PROFILE_SETTINGS, seed=seed)
    context = (f"get_ddp of {settings['layers']} Linear({settings['width']}, {settings['width']}) layers, "
               f"{world_size} ranks over NCCL, one profiled step")
    ranks = ranks_of(run_probe(adapters, "ddp_profile.profile", world_size, settings, timeout_s=90.0), context)
    for rank, result in enumerate(ranks):
        judge_overlap(result["value"]["kernels"], f"{context}; rank {rank}")


def overlap_figures(kernels: list) -> dict:
    """What ``kernels`` ((kind, start_us, end_us), see ddp_profile) say of overlap; times from the backward's first kernel.

    ``backward_us``: the backward's span (None without backward kernels); ``nccl``: how many NCCL
    kernels; ``started_inside``: how many start before the backward's last kernel ends;
    ``nccl_us_inside``: NCCL kernel time within the backward's span; ``first_nccl_us``: when the
    first NCCL kernel starts (None without any).
    """
    backward = [k for k in kernels if k[0] == "backward"]
    nccl = [k for k in kernels if k[0] == "nccl"]
    if not backward:
        return {"backward_us": None, "nccl": len(nccl), "started_inside": 0, "nccl_us_inside": 0.0,
                "first_nccl_us": None}
    first, last = min(k[1] for k in backward), max(k[2] for k in backward)
    return {"backward_us": last - first, "nccl": len(nccl), "started_inside": sum(k[1] < last for k in nccl),
            "nccl_us_inside": sum(max(0.0, min(end, last) - max(start, first)) for _, start, end in nccl),
            "first_nccl_us": min(k[1] for k in nccl) - first if nccl else None}


def judge_overlap(kernels: list, where: str) -> None:
    """AssertionError unless some "nccl" kernel of ``kernels`` ((kind, start_us, end_us)) starts before the last "backward" one ends."""
    figures = overlap_figures(kernels)
    assert figures["backward_us"] is not None, (
        f"the profiler recorded no GPU kernel launched during loss.backward() ({where})")
    assert figures["nccl"], (
        f"the profiler recorded no NCCL kernel in the step: no gradient was all-reduced over NCCL ({where})")
    assert figures["started_inside"], (
        f"{where}: none of the step's {figures['nccl']} NCCL kernels started before the backward's last kernel ended "
        f"(the backward's kernels ran from 0 to {figures['backward_us']:.0f} us; the first NCCL kernel started at "
        f"{figures['first_nccl_us']:.0f} us): the all-reduces ran after the backward instead of during "
        "it. Launch each gradient's all-reduce (async_op=True) from a hook as soon as that gradient is ready, "
        "and only wait for them in ddp_on_after_backward")
