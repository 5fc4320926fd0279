"""The trusted training run the gate compares with: one process, the whole global batch, plain AdamW.

Read by ``verdict.py``. Runs in the parent, with the kit's model (``harness.build_model``) and
the same data and settings as the ranks: data parallelism over equal slices, averaging the
gradients, must give the whole batch's losses and parameters. On the official config this
needs a GPU that holds the 8B model's training state; the ``--cpu`` run's tiny config runs anywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .rank import build_model, global_batch


def trusted_run(config: dict, device: str = "cpu") -> dict:
    """{"initial": {name: tensor}, "losses": [loss of step s, before its update], "params": {name: tensor}}."""
    model = build_model(config, device)
    initial = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    inputs, targets = global_batch(config)
    x, y = inputs.to(device), targets.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), **dict(config["optimizer"]))
    dtype = getattr(torch, config["compute_dtype"])
    losses = []
    for _ in range(config["gate_steps"]):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(x)  # (batch, seq, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    params = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    return {"initial": initial, "losses": losses, "params": params}
