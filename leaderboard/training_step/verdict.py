"""Judge an official run: the correctness gate and the cheat detectors, all in the parent.

Read by ``run.py``. Every fact judged here came back from the ranks as data (losses, full
parameters, the event log of collectives, call times); the truth (``trusted.py``) is computed
here. A refusal names each reason; a run is accepted only with none.

Detectors, each with a fixture in fixtures/training_step/:

- ``different_model``: the first step's loss is computed before any update, so it is the
  model's loss at its initial weights; it must equal the trusted model's (a submission that
  drops a layer, shrinks the vocabulary or swaps the loss changes it);
- ``no_update``: after the gate's steps the parameters must have moved from their initial
  values (an optimizer that does nothing leaves them where they were);
- ``no_communication``: each rank must call collectives during every step, and the ranks must
  end with the same parameters (ranks that each train on their own rows diverge);
- ``work_skipped_when_timed``: the timed calls must still train: each makes collectives as a
  gate step does, and the parameters after the timing differ from those after the gate (a step
  that returns a cached loss once the gate is over does neither);
- the gate itself: every step's loss (the mean of the ranks') and every parameter after the
  gate's steps match the trusted run within the config's tolerances.
"""

from __future__ import annotations

import torch

COLLECTIVE_EVENTS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                     "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "scatter", "gather")


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
            reasons.append(f"rank {rank}: full_parameters() must return the model's {len(names)} parameters by name; "
                           f"got {len(value['params'])} (missing {sorted(set(names) - set(value['params']))[:5]})")
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
