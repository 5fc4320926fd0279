"""Visible tests of §3.8 training_step: your step on two gloo ranks (the tiny config) against one process.

The same run as the training-step board's CPU run: each rank builds the provided LM (the kit's
copy of the model, float32, one seed), hands it to ``adapters.get_training_step``, runs three
steps on its rows of a batch of 4 sequences of 16 tokens, then three more calls as the board
times them. What comes back (losses, full parameters, every collective called) is judged here
against one process training on the whole batch with AdamW (harness/training_step.py).
"""

from __future__ import annotations

from harness.training_step import TINY, assert_passes, run_and_judge


def test_training_step_matches_single_process_training(adapters):
    reasons = run_and_judge(adapters, TINY)
    assert_passes(reasons, "gate", "the losses and the parameters after 3 steps on 2 ranks must be one process's "
                                   "on the whole batch (float32)")
