"""The trusted FSDP run (leaderboard/training_step/trusted_fsdp.py) on the CPU: gloo, two processes, the tiny configs.

Staff only (part of the kit's self-check). The official config's trusted run is FSDP2 over the
ranks, since 8B parameters' training state does not fit one process; here it runs at the tiny
shape and must (a) equal the single-process trusted run within the config's tolerances, on whole
tensors and on the sampled comparison, (b) let the reference be accepted when it is the truth,
and (c) still let the cheats be refused. About a minute on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from fixtures import materialize
from fixtures.training_step import get
from leaderboard.training_step import run as run_module
from leaderboard.training_step.config import OFFICIAL, TINY, TINY_BF16, TRIAL
from leaderboard.training_step.run import run
from leaderboard.training_step.trusted import trusted_run
from leaderboard.training_step.trusted_fsdp import trusted_fsdp_run
from executor.probes.training_step import compared, compared_indices


ENTRY = Path(__file__).resolve().parents[2] / "reference"  # the staff entry, as in test_training_step_cpu.py

SAMPLED = dataclasses.replace(TINY, name="tiny_sampled", compared_elements=40)
"""Tensors of more than 40 elements compared on a sample of them: the official rule, at the tiny shape."""


def _forced(config):
    """``config`` judged against the trusted FSDP run, as the official config is."""
    return dataclasses.replace(config, name=f"{config.name}_fsdp", trusted_fits=False)


@pytest.mark.parametrize("config", [TINY, SAMPLED, TINY_BF16], ids=lambda c: c.name)
def test_the_trusted_fsdp_run_equals_the_single_process_run(config):
    settings = config.as_dict()
    fsdp, single = trusted_fsdp_run(settings), trusted_run(settings)
    assert sorted(fsdp["params"]) == sorted(single["params"]), "the FSDP run must name every parameter as the model does"
    for name in single["params"]:
        assert torch.equal(fsdp["initial"][name], single["initial"][name]), f"{name}: the initial weights differ"
        assert fsdp["params"][name].shape == single["params"][name].shape, (
            f"{name}: the FSDP run gives shape {tuple(fsdp['params'][name].shape)}, the single-process run "
            f"{tuple(single['params'][name].shape)}: the two must compare the same elements")
    for step, (got, expected) in enumerate(zip(fsdp["losses"], single["losses"], strict=True)):
        assert abs(got - expected) <= config.loss_rtol * abs(expected), (
            f"step {step}: the FSDP run's loss is {got:.7f}, the single-process run's {expected:.7f} "
            f"(rtol {config.loss_rtol})")
    for name, expected in single["params"].items():
        got = fsdp["params"][name]
        if config.update_rtol is None:
            excess = ((got - expected).abs() - (config.param_atol + config.param_rtol * expected.abs())).max().item()
            assert excess <= 0, f"{name}: the FSDP run's parameter differs by up to {(got - expected).abs().max():.3g}"
        else:
            update = expected - single["initial"][name]
            ratio = ((got - expected).norm() / update.norm()).item()
            assert ratio <= config.update_rtol / 2, (
                f"{name}: the FSDP run's update differs from the single-process run's by {ratio:.3g} of its norm; "
                f"a truth that far off would spend over half the gate's budget ({config.update_rtol})")


def test_the_sample_is_fixed_spread_and_taken_from_the_full_tensor():
    settings = SAMPLED.as_dict()
    assert compared_indices("layers.0.ln1.weight", 32, settings) is None, "a tensor of <= 40 elements is compared whole"
    first = compared_indices("token_embeddings.weight", 97 * 32, settings)
    assert torch.equal(first, compared_indices("token_embeddings.weight", 97 * 32, settings)), "the sample must be fixed"
    assert not torch.equal(first, compared_indices("lm_head.weight", 97 * 32, settings)), "each tensor has its own"
    assert 30 <= first.numel() <= 40 and bool((first[1:] > first[:-1]).all()) and first.max() < 97 * 32
    assert len(set((first % 32).tolist())) > 10, "the sample must spread over the columns, not one of them"
    weight = torch.arange(97 * 32, dtype=torch.float32).reshape(97, 32)
    assert torch.equal(compared("token_embeddings.weight", weight, settings), first.float())


def test_the_reference_is_accepted_against_the_trusted_fsdp_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a config whose trusted run does not fit must not use the single-process run")

    monkeypatch.setattr(run_module, "trusted_run", refuse)
    outcome = run(ENTRY, _forced(SAMPLED))
    assert outcome.accepted, f"the staff entry must be accepted against the trusted FSDP run; refused: {outcome.reasons}"


@pytest.mark.parametrize("fixture", ["cheat_no_communication", "cheat_different_model"])
def test_a_cheat_is_still_refused_against_the_trusted_fsdp_run(fixture, tmp_path):
    detector = get(fixture).verdict.refused_by
    outcome = run(materialize(get(fixture), tmp_path / fixture), _forced(SAMPLED))
    assert any(reason.startswith(detector) for reason in outcome.reasons), (
        f"{fixture} must be refused by {detector} against the trusted FSDP run; the reasons were {outcome.reasons}")


def test_the_official_configs_use_the_trusted_fsdp_run_with_a_sample():
    for config in (OFFICIAL, TRIAL):
        assert not config.trusted_fits and config.trusted_offload, (
            f"{config.name}: 8B parameters' training state needs the offloaded trusted FSDP run")
        assert config.compared_elements == 65_536, f"{config.name}: the gate compares a sample of each tensor"
    assert TINY.compared_elements is None and TINY.trusted_fits, "the --cpu run compares every element, in one process"
