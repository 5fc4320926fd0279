"""Judge the sharded optimizer: parameters and local state against the plain optimizer, and the shards.

Read by tests/test_optimizer_state_sharding.py and its hidden twin. ``run_sharded_optimizer`` trains on
the ranks (executor/probes/optimizer_state_sharding.py), compares them with one process running the plain
optimizer (harness/parallel_reference.py) and checks the split; failures raise AssertionError.
"""

from __future__ import annotations

import torch

from executor.probes import run_probe
from harness import parallel_reference as reference
from harness.parallel_runs import (DDP_TOLERANCE, RUN_TIMEOUT_S, assert_dtypes_kept, assert_optimizer_state_close,
                                   assert_state_close, batch, ranks_of, state_in_dtype)


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
    check_parameters_split(ranks, names, world_size, context)
    if check_zero_grad:
        check_sharded_zero_grad(ranks, context)
    return ranks


def check_parameters_split(ranks: list[dict], names: list[str], world_size: int, context: str) -> None:
    """The local optimizers split ``names`` exactly: each owned once, state only for owned ones, none owning all."""
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
