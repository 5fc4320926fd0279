"""The trusted training run the gate compares with: one process, the whole global batch, plain AdamW.

Read by ``run.py``. The run itself is tests/checks/training_step.py's ``trusted_run`` (shared with
the §3.8 tests). On the official config it needs a GPU that holds the 8B model's training state;
the ``--cpu`` run's tiny config runs anywhere.
"""

from tests.checks.training_step import trusted_run  # noqa: F401  re-exported
