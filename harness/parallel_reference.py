"""The truth for part 2's tests: the same model trained on the whole batch in one process.

Read by harness/{ddp,optimizer_state_sharding,fsdp}_checks.py. Data-parallel training on ``world_size`` ranks, each taking
an equal slice of the batch and averaging gradients, must match plain training on the whole
batch: the mean of the ranks' mean losses is the mean loss over the batch. This runs here, in
the harness, with the kit's own copy of the provided model (never the submission's) and the
models of executor/probes/parallel_models.py.
"""

from __future__ import annotations

import torch

from executor.probes import parallel_models as models
from executor.probes.ddp import grads_of, make_optimizer, optimizer_state_of, state_of


def _kit_model_module():
    from cs336_systems import model  # the kit's provided model: this harness never imports the submission

    return model


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """Model ``name`` of parallel_models, built here; "lm" is the provided LM shrunk by ``LM_OVERRIDES``."""
    def make_lm():
        from cs336_systems.model_sizes import build_model

        return build_model("small", overrides=models.LM_OVERRIDES)

    return models.build(name, make_lm=make_lm, model_module=_kit_model_module(), seed=seed)


def initial_state(name: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Rank 0's initial parameters and buffers (``state_dict``) for model ``name``."""
    return state_of(build(name, seed))


def _sharded_weights(model: torch.nn.Module) -> set[str]:
    """Names of the weights an FSDP shards: those of layers whose class is named Linear or Embedding."""
    return {f"{name}.weight" if name else "weight" for name, layer in model.named_modules()
            if type(layer).__name__ in ("Linear", "Embedding") and isinstance(layer._parameters.get("weight"),
                                                                            torch.nn.Parameter)}


def train(name: str, init_state: dict, inputs: torch.Tensor, targets: torch.Tensor, *, steps: int,
          optimizer: str, lr: float, compute_dtype: torch.dtype | None = None,
          groups: list[list[str]] | None = None, add_group_at: int | None = None,
          dtype: torch.dtype | None = None) -> dict:
    """Train model ``name`` from ``init_state`` on the whole batch; return first-step grads and every step's state.

    ``compute_dtype``: the Linear and Embedding weights are cast to it for the forward and
    backward (float32 master weights, float32 gradients), as an FSDP with that dtype does.
    ``groups``/``add_group_at``: the parameters are split into named groups (lists of names);
    the optimizer starts with the first, and the second joins it, with lr / 2, before step
    ``add_group_at``. ``dtype``: the model's parameters and buffers are cast to it before
    ``init_state`` is loaded, and the floating inputs and targets are cast to it (as the DDP
    probe does on every rank): the truth is trained, and its states and gradients returned, in
    that dtype. Returns ``{"grads": {name: grad or None}, "states": [state after step s],
    "optimizer_state": {"<parameter>.<key>": tensor} after the last step}``.
    """
    model = build(name)
    if dtype is not None:
        model.to(dtype)
    model.load_state_dict(init_state)
    if dtype is not None:
        inputs = inputs.to(dtype) if inputs.is_floating_point() else inputs
        targets = targets.to(dtype) if targets.is_floating_point() else targets
    params = dict(model.named_parameters())
    if groups is None:
        opt = make_optimizer(optimizer, model.parameters(), lr)
    else:
        opt = make_optimizer(optimizer, [params[n] for n in groups[0]], lr)
    cast = _sharded_weights(model) if compute_dtype is not None else set()
    grads, states = None, []
    for step in range(steps):
        if groups is not None and step == add_group_at:
            opt.add_param_group({"params": [params[n] for n in groups[1]], "lr": lr / 2})
        opt.zero_grad(set_to_none=True)
        if cast:
            used = {n: (p.to(compute_dtype) if n in cast else p) for n, p in params.items()}
            output = torch.func.functional_call(model, used, (inputs,))
        else:
            output = model(inputs)
        models.loss_of(name, output, targets).backward()
        if step == 0:
            grads = grads_of(model)
        opt.step()
        states.append(state_of(model))
    names = {id(p): n for n, p in params.items()}
    return {"grads": grads, "states": states, "optimizer_state": optimizer_state_of([opt], names)}
