"""The training-step problem (§3.8) judged in the harness: its configs, the trusted run, the gate and the detectors.

Read by tests/test_training_step.py, its hidden twin, and the course's training-step board, which
all judge a run the same way. A run happens next to the submission
(executor/probes/training_step.py starts the ranks there); only the config goes out, and
only the ranks' losses, full parameters, call times and event logs come back. The truth
(:func:`trusted_run`: one process, the whole batch, plain AdamW) is computed here.

The rules, each a named reason of :func:`judge` (a reason starts with its detector's name):

- ``gate``: every step's loss (the mean of the ranks') and every parameter after the gate's
  steps match the trusted run within the config's tolerances;
- ``different_model``: the first step's loss is computed before any update, so it is the
  model's loss at its initial weights; it must equal the trusted model's (dropping a layer,
  shrinking the vocabulary or swapping the loss changes it);
- ``no_update``: after the gate's steps the parameters must have moved from their initial values;
- ``no_communication``: each rank calls collectives during every step, and the ranks end with
  the same parameters (ranks that each train on their own rows diverge);
- ``work_skipped_when_timed``: the timed calls still train: each makes collectives as a gate
  step does, and the parameters after the timing differ from those after the gate (a step that
  returns a cached loss once the gate is over does neither).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from harness.parallel_runs import ranks_of
from executor.probes import run_probe
from executor.probes.training_step import build_model, compared, global_batch


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One training-step problem: the model, the global batch, the dtype, and how it is timed and judged."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    context_length: int
    batch_size: int            # global: each of ``world_size`` ranks takes batch_size / world_size rows
    compute_dtype: str         # the dtype the step must compute in ("bfloat16" officially)
    world_size: int = 2
    seed: int = 0
    gate_steps: int = 3        # steps checked against the trusted run before timing
    warmup_ms: float = 0.0     # GPU timing (do_bench's meaning): milliseconds of warm-up, then of measurement
    rep_ms: float = 0.0
    warmup_calls: int = 1      # CPU fallback: calls not timed, then calls timed (each one on its own)
    rep_calls: int = 3
    time_limit_s: float = 600.0  # the whole run: start, gate, timing; a run past it is refused
    loss_rtol: float = 1e-5    # every step's loss (mean of the ranks') against the trusted run's
    param_atol: float = 1e-5   # every parameter after gate_steps steps: |got - truth| <= atol + rtol |truth|
    param_rtol: float = 1e-4
    update_rtol: float | None = None  # 16-bit configs instead: each tensor's update (after - initial) within
    #                                   update_rtol of the trusted update, in norm: ||got - truth|| / ||truth||
    ranks_atol: float = 1e-6   # the ranks' parameters after the gate: at most this far apart (one model)
    trusted_fits: bool = True  # the trusted run fits one process on one device (False: the course board's trusted
    #                            FSDP run over world_size processes; trusted_run here is then not used)
    trusted_offload: bool = False  # that FSDP run keeps its sharded weights, gradients and AdamW state in host
    #                               memory (FSDP2's CPUOffloadPolicy; CUDA only), so that a GPU holds only activations
    compared_elements: int | None = None  # the gate compares every element of each parameter (None), or at most
    #                                       this many per tensor, a fixed sample (probes.training_step.compared_indices)
    optimizer: tuple = (("lr", 1e-3), ("betas", (0.9, 0.95)), ("eps", 1e-8), ("weight_decay", 0.1))

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.compute_dtype)

    def optimizer_settings(self) -> dict:
        """AdamW's settings, as handed to the submission and used by the trusted run."""
        return dict(self.optimizer)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


TINY = StepConfig(
    name="tiny", d_model=32, d_ff=64, num_layers=2, num_heads=4, vocab_size=97, context_length=16,
    batch_size=4, compute_dtype="float32", gate_steps=3, warmup_calls=1, rep_calls=3, time_limit_s=120.0,
)
"""The CPU run's problem (gloo, two processes): the pipeline, not the speed."""

TINY_BF16 = dataclasses.replace(TINY, name="tiny_bf16", compute_dtype="bfloat16", gate_steps=2, loss_rtol=2e-2,
                                update_rtol=0.3)
"""The 16-bit gate (the updates compared in norm) on the CPU."""

COLLECTIVE_EVENTS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                     "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "scatter", "gather")
DETECTORS = ("gate", "different_model", "no_update", "no_communication", "work_skipped_when_timed")


def trusted_run(config: dict, device: str = "cpu") -> dict:
    """{"initial": {name: tensor}, "losses": [loss of step s, before its update], "params": {name: tensor}}.

    One process, the whole global batch, plain AdamW: data parallelism over equal slices with the
    gradients averaged must give the same losses and parameters. Each parameter is given as the
    gate compares it (``compared``: float32 on the CPU, whole or the config's sample).
    """
    model = build_model(config, device)
    initial = {name: compared(name, p, config) for name, p in model.named_parameters()}
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
    params = {name: compared(name, p, config) for name, p in model.named_parameters()}
    return {"initial": initial, "losses": losses, "params": params}


def _max_excess(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> float:
    """max(|got - expected| - (atol + rtol |expected|)): > 0 when outside the tolerance."""
    return ((got - expected).abs() - (atol + rtol * expected.abs())).max().item()


def collectives_per_step(events: list[tuple], steps: int) -> list[int]:
    """How many collectives the rank called in each of the gate's steps."""
    counts = []
    for s in range(steps):
        start = events.index(("step", s))
        end = events.index(("step", s + 1)) if s + 1 < steps else events.index(("gate_done",))
        counts.append(sum(1 for e in events[start:end] if e[0] in COLLECTIVE_EVENTS))
    return counts


def judge(ranks: list[dict], truth: dict, config: dict) -> list[str]:
    """The reasons to refuse the run (empty: accepted). ``ranks``: each rank's {"value", "events"}."""
    reasons: list[str] = []
    values = [r["value"] for r in ranks]
    names = sorted(truth["params"])
    for rank, value in enumerate(values):
        if sorted(value["params"]) != names:
            reasons.append(f"gate: rank {rank}: full_parameters() must return the model's {len(names)} parameters by "
                           f"name; got {len(value['params'])} (missing {sorted(set(names) - set(value['params']))[:5]})")
    if reasons:
        return reasons
    first = sum(v["losses"][0] for v in values) / len(values)
    if abs(first - truth["losses"][0]) > config["loss_rtol"] * abs(truth["losses"][0]):
        reasons.append(f"different_model: the first step's loss (before any update) is {first:.6f}, the provided "
                       f"model's is {truth['losses'][0]:.6f}: the model's input/output behaviour changed")
    moved = max((values[0]["params"][n] - truth["initial"][n]).abs().max().item() for n in names)
    if moved == 0.0:
        reasons.append(f"no_update: after {config['gate_steps']} steps no parameter has changed: the optimizer "
                       "did not update the model")
    for rank, result in enumerate(ranks):
        counts = collectives_per_step(result["events"], config["gate_steps"])
        if config["world_size"] > 1 and not all(counts):
            reasons.append(f"no_communication: rank {rank} called no collective in steps "
                           f"{[s for s, c in enumerate(counts) if not c]}: the ranks never combine their gradients")
    for rank, value in enumerate(values[1:], start=1):
        apart = max((value["params"][n] - values[0]["params"][n]).abs().max().item() for n in names)
        if apart > config["ranks_atol"]:
            reasons.append(f"no_communication: rank {rank}'s parameters differ from rank 0's by up to {apart:.3g} "
                           "after the gate's steps: the ranks are not training one model")
    for rank, (result, value) in enumerate(zip(ranks, values)):
        events = result["events"]
        calls = [i for i, e in enumerate(events) if e[0] == "timed_call"] + [events.index(("timing_done",))]
        idle = [n for n, (a, b) in enumerate(zip(calls, calls[1:]))
                if config["world_size"] > 1 and not any(e[0] in COLLECTIVE_EVENTS for e in events[a:b])]
        if idle:
            reasons.append(f"work_skipped_when_timed: rank {rank} called no collective in timed calls {idle} (every "
                           "gate step did): the timed step is not the step that was checked")
        still = max((value["params_after_timing"][n] - value["params"][n]).abs().max().item() for n in names)
        if still == 0.0:
            reasons.append(f"work_skipped_when_timed: rank {rank}'s parameters did not change during the "
                           f"{len(calls) - 1} timed calls: the timed step did not train")
    for s, expected in enumerate(truth["losses"]):
        got = sum(v["losses"][s] for v in values) / len(values)
        if abs(got - expected) > config["loss_rtol"] * abs(expected):
            reasons.append(f"gate: step {s}'s loss (mean over the ranks) is {got:.6f}; the trusted run's is "
                           f"{expected:.6f} (rtol {config['loss_rtol']})")
    if config["update_rtol"] is None:
        worst = max(names, key=lambda n: _max_excess(values[0]["params"][n], truth["params"][n],
                                                     config["param_atol"], config["param_rtol"]))
        excess = _max_excess(values[0]["params"][worst], truth["params"][worst], config["param_atol"],
                             config["param_rtol"])
        if excess > 0:
            diff = (values[0]["params"][worst] - truth["params"][worst]).abs().max().item()
            reasons.append(f"gate: after {config['gate_steps']} steps {worst} differs from the trusted run's by up "
                           f"to {diff:.3g} (atol {config['param_atol']}, rtol {config['param_rtol']})")
    else:
        # 16-bit: a parameter moves by about lr a step, far below bf16's resolution of the weight
        # itself, and AdamW's first steps move each element by about +-lr whatever its gradient's
        # size, so elements whose tiny gradients change sign under rounding move the other way.
        # The updates are compared as whole tensors: ||got - trusted|| / ||trusted||.
        for name in names:
            got = values[0]["params"][name] - truth["initial"][name]
            expected = truth["params"][name] - truth["initial"][name]
            ratio = ((got - expected).norm() / expected.norm().clamp_min(1e-30)).item()
            if ratio > config["update_rtol"]:
                reasons.append(f"gate: after {config['gate_steps']} steps the update of {name} differs from the "
                               f"trusted run's by {ratio:.3g} of its norm (at most {config['update_rtol']})")
                break
    return reasons


def ranks_of_run(result: dict, config: dict) -> list[dict]:
    """The ranks' results of one run; NotImplementedError for a stub, AssertionError for a crash or
    a hang (``parallel_runs.ranks_of``, under this run's time limit)."""
    where = f"the training step on {config['world_size']} ranks ({config['name']} config, gloo)"
    return ranks_of({"timeout_s": config["time_limit_s"], **result}, where)


def run_and_judge(adapters, config: StepConfig = TINY) -> list[str]:
    """Run the submission's step on ``config`` next to it, compute the truth here; return :func:`judge`'s reasons."""
    settings = config.as_dict()
    ranks = ranks_of_run(run_probe(adapters, "training_step.train", settings), settings)
    return judge(ranks, trusted_run(settings), settings)


def assert_passes(reasons: list[str], detector: str, rule: str) -> None:
    """AssertionError naming every reason of ``detector`` (a name of DETECTORS), with the rule it enforces."""
    mine = [reason for reason in reasons if reason.startswith(detector)]
    assert not mine, f"{rule}:\n  " + "\n  ".join(mine)
