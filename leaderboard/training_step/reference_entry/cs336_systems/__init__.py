"""The staff reference entry of the training-step board (see fast_training_step.py)."""
