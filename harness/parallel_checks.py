"""Run part 2's probes and judge what comes back: the verdict helpers of the DDP, sharded-optimizer and FSDP tests.

Read by tests/test_{naive_ddp,ddp_flat,ddp_overlap_individual,ddp_bucketed,
optimizer_state_sharding,fsdp}.py and their hidden twins. A run happens next to the
submission (executor/probes/ddp.py and siblings start the ranks there); only the
settings go out and only the ranks' observations come back. Everything here, the truth
included (harness/parallel_reference.py), runs in the harness.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import torch

from harness.assertions import assert_close
from executor.probes import parallel_models as models
from executor.probes import run_probe
from executor.probes.parallel_launch import COLLECTIVES
from harness import parallel_reference as reference

RUN_TIMEOUT_S = 60.0
COLLECTIVE_NAMES = frozenset(COLLECTIVES)
"""The event names of logged collectives (their aliases log under names of this set)."""
FP32_TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}


def batch(model: str, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of ``size`` rows for model ``model``."""
    generator = torch.Generator().manual_seed(seed)
    if model == "lm":
        vocab = models.LM_OVERRIDES["vocab_size"]
        tokens = torch.randint(0, vocab, (size, 9), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]
    if model == "fsdp_chain":
        tokens = torch.randint(0, models.FSDPChain.VOCAB, (size, 7), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]
    return torch.randn(size, 10, generator=generator), torch.randn(size, 5, generator=generator)


def ranks_of(result: dict, what: str) -> list[dict]:
    """The ranks' results of one run; AssertionError naming each failed rank, or the hang.

    With ``CS336_RANK_EXIT_LOG`` set (a staff measurement), appends one JSON line per run to that
    file: the ranks' exit codes, so that aborts in the teardown after a report can be counted.
    """
    log = os.environ.get("CS336_RANK_EXIT_LOG")
    if log:
        with open(log, "a") as file:
            file.write(json.dumps({"what": what, "exit_codes": result.get("exit_codes"),
                                   "reported": [r is not None for r in result["ranks"]]}) + "\n")
    if result["timed_out"]:
        raise AssertionError(
            f"{what}: the ranks did not finish within {result['timeout_s']:.0f} s (a hang: a rank waits in a "
            "collective that another rank never calls, or for a handle that is never waited on); "
            + "; ".join(f"rank {r}: {text.splitlines()[-1] if text else ''}" for r, text in result["errors"].items()))
    for rank, (kind, message) in sorted(result.get("error_types", {}).items()):
        if kind == "NotImplementedError":  # a stub: say which one, as a call in one process would
            raise NotImplementedError(f"{message} (raised on rank {rank} of {what})")
    if result["errors"]:
        rank, text = sorted(result["errors"].items())[0]
        raise AssertionError(f"{what}: rank {rank} failed:\n{text}")
    return result["ranks"]


def assert_state_close(got: dict, expected: dict, *, what: str, context: str, exact: bool = False,
                       tolerance: dict | None = None) -> None:
    """Every entry of ``expected`` ({name: tensor or None}) is in ``got`` and close to it (None stays None)."""
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{what}: {missing} missing ({context})"
    for name, value in expected.items():
        if value is None:
            assert got[name] is None, (
                f"{what} of {name} must stay None (it got no gradient in the whole-batch run); got a tensor "
                f"({context})")
            continue
        assert got[name] is not None, f"{what} of {name} is None; expected a tensor ({context})"
        if exact:
            assert torch.equal(got[name], value), (
                f"{what} of {name} differs from rank 0's (max |diff| "
                f"{(got[name].float() - value.float()).abs().max().item():.3g}) ({context})")
        else:
            assert_close(got[name], value, **(tolerance or FP32_TOLERANCE), what=f"{what} of {name}", context=context)


STATE_RTOL = 1e-4
"""Optimizer state is compared per tensor at its own scale: atol = STATE_RTOL * max |expected|."""


def assert_optimizer_state_close(got: dict, expected: dict, *, what: str, context: str) -> None:
    """Every tensor of ``expected`` ({"<param>.<key>": tensor}) is in ``got`` and close at its own scale.

    A second moment (AdamW's exp_avg_sq) is about the square of a gradient, often 1e-8 or less,
    so the parameters' absolute tolerance would accept any value there, zeros included.
    """
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{what}: {missing} missing ({context})"
    for name, value in expected.items():
        scale = value.abs().max().item() if value.numel() else 0.0
        assert_close(got[name], value, atol=STATE_RTOL * scale, rtol=STATE_RTOL, what=f"{what} {name}",
                     context=context)


# -- DDP -----------------------------------------------------------------------------------

DDP_TOLERANCE = {torch.float32: FP32_TOLERANCE, torch.float64: {"atol": 1e-12, "rtol": 1e-10},
                 torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}, torch.float16: {"atol": 2e-3, "rtol": 2e-3}}
"""A data-parallel run against the whole-batch run in the same dtype: only the order of the sums
differs, so each dtype gets a few of its own rounding steps. float64's bound is far below
float32's rounding (about 6e-8 relative): gradients that went through a float32 buffer fail it."""


def state_in_dtype(state: dict[str, torch.Tensor], dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """``state``'s floating tensors in ``dtype``; in a dtype finer than float32, moved off float32's grid.

    The models are built in float32, so their values cast to float64 survive a float32 round
    trip exactly; a tiny seeded offset (about 1e-6 of each value) gives them digits float32
    cannot hold, so that a broadcast or an all-reduce through a float32 buffer changes them.
    """
    generator = torch.Generator().manual_seed(seed)
    finer = torch.finfo(dtype).eps < torch.finfo(torch.float32).eps
    out = {}
    for name, value in state.items():
        if not value.is_floating_point():
            out[name] = value.clone()
            continue
        value = value.to(dtype)
        if finer:
            value = value * (1 + 1e-6 * torch.randn(value.shape, generator=generator, dtype=dtype))
        out[name] = value
    return out


KEEP_GRADIENT_DTYPE = ("Allocate each buffer with the gradients' dtype (torch.empty(n) is the default dtype, "
                       "float32) and write the averages back into each .grad in its own dtype")


def assert_dtypes_kept(got: dict, dtype: torch.dtype, *, what: str, context: str,
                       advice: str = KEEP_GRADIENT_DTYPE) -> None:
    """Every floating tensor of ``got`` ({name: tensor or None}) is in ``dtype``, the model's."""
    other = {name: str(t.dtype).removeprefix("torch.") for name, t in got.items()
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype}
    name = str(dtype).removeprefix("torch.")
    assert not other, (
        f"{what} must keep the dtype of its parameter ({name}: the whole model is {name}); got {other} ({context}). "
        f"{advice}")


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
    context += f", {backend}"
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


def step_events(events: list[tuple], step: int) -> list[tuple]:
    """The events of training step ``step`` (from its ("step", step) marker to the next step's)."""
    start = events.index(("step", step))
    following = [i for i, e in enumerate(events) if e[0] == "step" and i > start]
    return events[start:following[0] if following else len(events)]


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


def describe(events: list[tuple]) -> str:
    return "\n  ".join(map(str, events))


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


def assert_every_handle_waited(ranks: list[dict], steps: int, context: str) -> None:
    """Each asynchronous collective a step launched was waited on before that step's synchronisation ended.

    Read from the probe's own log, so the verdict does not depend on which thread won: a
    handle's ``wait()``, a ``get_future()`` waited on (directly, through a future chained by
    ``then``, or ``torch.futures.wait_all``), or ``is_completed()``/``done()`` answering True,
    each logged before ("synced", step). A handle never waited on leaves the gradient to
    whichever of the communication thread and the optimizer writes it last.
    """
    for rank, result in enumerate(ranks):
        events = result["events"]
        for step in range(steps):
            start, synced = events.index(("step", step)), events.index(("synced", step))
            waited = {e[3] for e in events[start:synced] if e[0] == "wait"}
            missed = [(i, e) for i, e in enumerate(events[start:synced], start)
                      if e[0] in COLLECTIVE_NAMES and e[3] and i not in waited]
            assert not missed, (
                f"{context}; rank {rank}, step {step}: {len(missed)} asynchronous collective(s) launched in this step "
                f"were never waited on before finish_gradient_synchronization returned: "
                f"{[f'{e[0]} of {e[1]} elements' for _, e in missed]}. Until its handle's wait() (or its future's) "
                f"returns, a collective may still be writing the gradient: its value then depends on a race. Wait "
                f"on every handle the step launched before returning; events of step {step}:\n  "
                f"{describe(step_events(events, step))}")


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


# -- optimizer state sharding --------------------------------------------------------------


def run_sharded_optimizer(adapters, model: str, world_size: int, *, steps: int = 3, optimizer: str = "AdamW",
                          lr: float = 0.05, split_at: int | None = None, add_group_at: int | None = None,
                          seed: int = 0, rows: int = 6, check_zero_grad: bool = False,
                          closure: bool = False, dtype: torch.dtype = torch.float32) -> list[dict]:
    """Train ``model`` with the sharded optimizer on ``world_size`` ranks and check it against the plain one.

    ``split_at``: the parameters (in ``named_parameters()`` order) are split there into two
    groups; the optimizer starts with the first and the second is added, with lr / 2, before
    step ``add_group_at``. Checks every rank's final state, and its local optimizers' state,
    against one process with the plain optimizer (each parameter with state there has it on some
    rank), and that the local optimizers' parameters split the parameters exactly (each
    owned by one rank, state only for owned ones, no rank owning all). A local optimizer is an
    instance of ``optimizer_cls`` that holds a model parameter or steps; one made only to read the
    class's defaults is not (see the probe). ``check_zero_grad``: also
    check ``check_sharded_zero_grad``. ``closure``: every step is ``opt.step(closure)`` (the
    closure clears, forwards and backwards), and each must return the closure's loss, as
    ``torch.optim.Optimizer.step(closure)`` does. ``dtype``: the whole model is in that dtype on
    every rank and in the truth (a float64 model starts from values float32 cannot hold,
    ``state_in_dtype``); the parameters must stay in it and match within ``DDP_TOLERANCE[dtype]``,
    so a broadcast through a float32 buffer fails. Returns the ranks' results.
    """
    init = reference.initial_state(model, seed)
    if dtype != torch.float32:
        init = state_in_dtype(init, dtype, seed)
    inputs, targets = batch(model, rows, seed + 1)
    names = [name for name, _ in reference.build(model).named_parameters()]
    groups = None if split_at is None else [names[:split_at], names[split_at:]]
    dtype_name = str(dtype).removeprefix("torch.")
    settings = dict(model=model, init_state=init, inputs=inputs, targets=targets, steps=steps, optimizer=optimizer,
                    lr=lr, groups=groups, add_group_at=add_group_at, closure=closure,
                    dtype=None if dtype == torch.float32 else dtype_name)
    context = (f"sharded {optimizer}(lr={lr}) on the {model!r} model in {dtype_name}, {world_size} ranks, {steps} steps"
               + (", each opt.step(closure) with a closure that runs the forward and backward" if closure else "")
               + (f", second group of {len(groups[1])} parameters added before step {add_group_at}" if groups else ""))
    ranks = ranks_of(run_probe(adapters, "optimizer_state_sharding.train", world_size, settings,
                               timeout_s=RUN_TIMEOUT_S), context)
    truth = reference.train(model, init, inputs, targets, steps=steps, optimizer=optimizer, lr=lr, groups=groups,
                            add_group_at=add_group_at, dtype=None if dtype == torch.float32 else dtype)
    for rank, result in enumerate(ranks):
        if closure:
            value = result["value"]
            assert len(value["closure_losses"]) == steps, (
                f"{context}; rank {rank}: the closure passed to step(closure) ran {len(value['closure_losses'])} "
                f"times in {steps} steps; step(closure) must call it (once) to get the gradients and the loss, "
                f"as torch.optim.Optimizer.step does: hand it to the local optimizer's step")
            assert value["returned"] == value["closure_losses"], (
                f"{context}; rank {rank}: step(closure) returned {value['returned']}, the closure's losses were "
                f"{value['closure_losses']}: step must return what the closure returned")
        assert_dtypes_kept(result["value"]["final"], dtype, what=f"after {steps} steps, every parameter and buffer",
                           context=f"{context}; rank {rank}",
                           advice="Broadcast each parameter in its own dtype (a flat buffer made with torch.empty(n) "
                                  "is the default dtype, float32), and never replace a parameter's .data")
        assert_state_close(result["value"]["final"], truth["states"][-1], what=f"after {steps} steps, the parameter",
                           context=f"{context}; rank {rank} (after each step every rank must hold every parameter "
                                   "as its owner updated it: broadcast them)",
                           tolerance=DDP_TOLERANCE[dtype] if dtype != torch.float32 else None)
    held: set[str] = set()
    for rank, result in enumerate(ranks):
        got = result["value"]["optimizer_state"]
        assert_optimizer_state_close(got, {key: value for key, value in truth["optimizer_state"].items() if key in got},
                                     what=f"after {steps} steps, the local optimizer's state",
                                     context=f"{context}; rank {rank}")
        held |= {key.rsplit(".", 1)[0] for key in got}
    stateless = sorted({key.rsplit(".", 1)[0] for key in truth["optimizer_state"]} - held)
    assert not stateless, (
        f"after {steps} steps, no rank's local optimizer holds state for {stateless}, which the plain optimizer "
        f"has state for: each parameter's owner must step it with its own local optimizer ({context})")
    owned = [result["value"]["owned"] for result in ranks]
    for rank, result in enumerate(ranks):
        value = result["value"]
        assert value["instances"] >= 1, (
            f"rank {rank} never created a local optimizer of optimizer_cls that holds a parameter of the model or "
            f"steps ({value.get('left_out', 0)} other instances, which do neither, are not counted) ({context})")
        extra = sorted(set(value["with_state"]) - set(value["owned"]))
        assert not extra, f"rank {rank} holds optimizer state for parameters it does not own: {extra} ({context})"
        assert len(value["owned"]) == len(set(value["owned"])), (
            f"rank {rank}'s local optimizers hold a parameter twice: {value['owned']} ({context})")
    everyone = sorted(name for names_of_rank in owned for name in names_of_rank)
    assert everyone == sorted(names), (
        f"the ranks' local optimizers must hold every parameter exactly once between them; they hold {owned} "
        f"(rank by rank), the parameters are {names} ({context})")
    if world_size > 1 and len(names) >= world_size:
        assert all(len(o) < len(names) for o in owned), (
            f"a rank's local optimizer holds every parameter: the state is not sharded ({owned}; {context})")
        assert all(o for o in owned), f"a rank owns no parameter although there are enough: {owned} ({context})"
    if check_zero_grad:
        check_sharded_zero_grad(ranks, context)
    return ranks


def check_sharded_zero_grad(ranks: list[dict], context: str) -> None:
    """The sharded optimizer's ``zero_grad`` cleared every parameter's gradient, owned by this rank or not.

    A ``zero_grad`` that clears only the local optimizer's parameters leaves the others'
    gradients to accumulate step after step; under a DDP, whose all-reduce then averages stale
    sums, the owners step with wrong gradients.
    """
    for rank, result in enumerate(ranks):
        left = result["value"]["zero_grad"]
        owned = result["value"]["owned"]
        for mode, names in (("set_to_none=True", left["set_to_none"]), ("set_to_none=False", left["in_place"])):
            assert not names, (
                f"{context}; rank {rank}: after the sharded optimizer's zero_grad({mode}), {names} still hold a "
                f"gradient ({'not None' if mode.endswith('True') else 'not all zeros'}); zero_grad must clear every "
                f"parameter's gradient, not only those this rank owns ({owned}): the inherited "
                f"torch.optim.Optimizer.zero_grad does")


# -- FSDP ------------------------------------------------------------------------------------

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
