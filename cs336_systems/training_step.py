"""§3.8 training_step: the fastest full training step of the provided LM on two GPUs (the training-step board).

You write ``TrainingStep`` (see handout/README.md, §3.8). Every rank of a
``torch.distributed`` run builds one, and the board calls its ``step`` again and again.
"""

from __future__ import annotations

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§3.8 training_step"


class TrainingStep:
    """One full training step of the provided ``TransformerLM`` on this rank's rows, on every rank.

    The board (and the §3.8 tests) starts ``world_size`` ranks (2 officially; gloo on a CPU,
    NCCL with one GPU a rank) after ``torch.distributed.init_process_group``. On each rank it
    builds the provided model in float32 from one seed (every rank gets the same initial
    weights), hands it to this class, and then calls :meth:`step` with that rank's rows of the
    global batch: first a few times for the correctness gate, then many times while it times
    the calls. It times each call itself, with CUDA events around it (on the CPU, a wall clock).

    What one ``step`` must do, on this rank's rows: the forward in ``compute_dtype`` (autocast
    or casts: your choice), the mean cross-entropy over this rank's tokens, the backward, the
    communication that makes the update the whole global batch's (the gradient averaged over
    the ranks, as one process on the whole batch would compute it), and one
    ``torch.optim.AdamW`` update with ``optimizer_settings``. After any number of steps the
    parameters must be those of one process training on the whole batch with plain AdamW.

    What you may do: anything that computes the same training step faster or in less memory:
    shard parameters, gradients and optimizer state (FSDP, ZeRO), overlap communication with
    compute, checkpoint activations, fuse or chunk the LM head with its loss, replace the
    model's attention by an equivalent kernel (the mask is always causal), cast to
    ``compute_dtype``, restructure the modules (keep ``full_parameters``' names).

    What the board refuses (each is checked in the §3.8 tests, the hidden ones included):

    - ``gate``: a step whose losses (the mean of the ranks') or parameters after the gate's
      steps differ from the trusted single-process run's beyond the tolerances (float32:
      loss rtol 1e-5, each parameter atol 1e-5 + rtol 1e-4; bf16: loss rtol 2e-2, each
      tensor's update within 0.3 of the trusted update in norm);
    - ``different_model``: the first step's loss, computed before any update, is not the
      provided model's at its initial weights (a layer skipped, a smaller vocabulary, another loss);
    - ``no_update``: the parameters do not move (the optimizer step skipped);
    - ``no_communication``: a rank calls no ``torch.distributed`` collective during a step,
      or the ranks' parameters differ after the gate (each rank training on its own rows);
    - ``work_skipped_when_timed``: a timed call makes no collective, or the timed calls leave
      the parameters where the gate left them (a cached loss returned once the gate is over).

    Every collective you call through ``torch.distributed`` is logged; the step is timed by the
    board, never by you; patching timers, the clock or ``torch.distributed`` is cheating.

    Args:
        model: the provided ``cs336_systems.model.TransformerLM``, float32, on this rank's
            device (``cuda:<rank>`` on GPUs, else the CPU); yours to wrap, shard or rebuild.
        optimizer_settings: AdamW's keyword arguments: ``lr``, ``betas``, ``eps``, ``weight_decay``.
        compute_dtype: ``torch.float32`` or ``torch.bfloat16`` (the official problem's).
    """

    def __init__(self, model: torch.nn.Module, optimizer_settings: dict, compute_dtype: torch.dtype):
        raise not_implemented(__file__, "TrainingStep", _SECTION)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One training step on this rank's rows; returns the mean cross-entropy before the update.

        Args:
            inputs: (rows, seq) token ids on this rank's device.
            targets: (rows, seq) token ids: the next token of each input.

        Returns:
            A scalar tensor (or float): the mean cross-entropy of this rank's tokens, computed by
            this step's forward (before its update).
        """
        raise not_implemented(__file__, "TrainingStep.step", _SECTION)

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter of the model, whole, as the ranks now hold it: ``{name: tensor}``.

        Names are the provided model's (``model.named_parameters()``); each tensor has its full
        shape (gather shards first: every rank calls this at the same point). Read-only for the
        caller; any dtype (it is compared in float32).
        """
        raise not_implemented(__file__, "TrainingStep.full_parameters", _SECTION)
