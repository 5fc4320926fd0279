"""Hidden tests of §3.8 training_step: the training-step board's rules, one test each, and the bf16 gate.

Each test runs the submission's step on two gloo ranks (harness/training_step.py) and
applies one of the board's detectors; the cheats of the board's fixtures each fail one of
them (autograder/selftests/test_training_step_cheats.py).
"""

from __future__ import annotations

from harness.training_step import TINY, TINY_BF16, assert_passes, run_and_judge


def test_training_step_trains_the_provided_model(adapters):
    assert_passes(run_and_judge(adapters, TINY), "different_model",
                  "the first step's loss must be the provided model's at its initial weights")


def test_training_step_updates_the_parameters(adapters):
    assert_passes(run_and_judge(adapters, TINY), "no_update", "every step must update the parameters with AdamW")


def test_training_step_communicates_every_step(adapters):
    assert_passes(run_and_judge(adapters, TINY), "no_communication",
                  "the ranks must combine their gradients in every step and hold one model")


def test_training_step_still_trains_when_timed(adapters):
    assert_passes(run_and_judge(adapters, TINY), "work_skipped_when_timed",
                  "the timed calls must be the same full training step as the gate's")


def test_training_step_bf16_gate(adapters):
    assert_passes(run_and_judge(adapters, TINY_BF16), "gate",
                  "in bf16 each parameter's update after 2 steps must be within 0.3 of one process's, in norm")
