"""The staff reference entry of the training-step board (leaderboard/training_step/reference_entry)."""

from cs336_systems.fast_training_step import FastTrainingStep


def get_training_step(model, optimizer_settings, compute_dtype):
    return FastTrainingStep(model, optimizer_settings, compute_dtype)
