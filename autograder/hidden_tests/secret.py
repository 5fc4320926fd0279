"""The course's secret: every hidden case's inputs and every example a grade draws derive from it.

Staff only (never shipped). Read by autograder/hidden_tests/flash_hidden_checks.py (hidden
seeds), autograder/watchdog.py (which hands it to every test process, so that the visible tests'
Hypothesis examples derive from it too: harness/example_seeds.py) and autograder/redaction.py (which
redacts it and the seeds derived from it). Set a new ``$CS336_HIDDEN_SEED`` each term; without
one, the default below is used, which never leaves this directory.
"""

from __future__ import annotations

import os

SEED_ENV = "CS336_HIDDEN_SEED"
DEFAULT_SECRET = "cs336-systems-flash-7f3a9c1e2b"


def course_secret() -> str:
    """``$CS336_HIDDEN_SEED`` when set, else ``DEFAULT_SECRET``."""
    return os.environ.get(SEED_ENV) or DEFAULT_SECRET
