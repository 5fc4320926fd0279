"""Where every random example of a test comes from: the course's secret and the test's node id.

Registered by conftest.py as a pytest plugin; read by staff who need a grade to be a fact about
the submission. Before each test runs:

- a Hypothesis test (the shape fuzzing of tests/test_flash_*.py) gets Hypothesis's own
  ``@seed(example_seed(nodeid))``, which also turns its example database off. So the same test
  draws the same examples, in the same order, shrinks the same way, every time it runs: every
  student of a term gets the same examples, and a regrade gives the same verdicts;
- Python's ``random``, NumPy's and torch's global generators (in this process, the harness)
  are seeded from the same number, so anything a test draws without its own generator is
  fixed too.

``example_seed(nodeid)`` is a hash of the secret and the node id. The secret is
``$CS336_HIDDEN_SEED``, which the grader always sets (the course's secret, or the staff default
that the hidden tests use, set by the grader), so the examples of a grade cannot be
predicted from the kit. Without it (a student's own run) the secret is the public word
``PUBLIC_SECRET``: a student's runs are reproducible too, and draw other examples than the
grade's. ``pytest --hypothesis-seed=N`` overrides the per-test seed, to search elsewhere, and
``HYPOTHESIS_PROFILE=thorough`` draws many more examples. A failing example still prints its
one-line repro (``FlashCase.command``), which reruns that example whatever the seed.
"""

from __future__ import annotations

import hashlib
import os
import random

import pytest

SEED_ENV = "CS336_HIDDEN_SEED"
PUBLIC_SECRET = "cs336-visible-examples"


def course_secret() -> str:
    """The secret every seed of this run derives from: ``$CS336_HIDDEN_SEED``, else ``PUBLIC_SECRET``."""
    return os.environ.get(SEED_ENV) or PUBLIC_SECRET


def example_seed(nodeid: str, secret: str | None = None) -> int:
    """A 31-bit seed for the test ``nodeid`` (as pytest names it from the kit's root), from ``secret``
    (default: ``course_secret()``). Different tests, or different secrets, get unrelated seeds."""
    secret = course_secret() if secret is None else secret
    digest = hashlib.sha256(f"{secret}/examples/{nodeid}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def seed_hypothesis_test(function, value: int) -> bool:
    """Give the Hypothesis test ``function`` (the object ``@given`` returned) the seed ``value``,
    with Hypothesis's own ``@seed`` (which also sets ``database=None``); False if it is not one."""
    if getattr(function, "hypothesis", None) is None:
        return False
    from hypothesis import seed

    seed(value)(function)
    return True


def _seed_globals(value: int) -> None:
    random.seed(value)
    try:
        import numpy

        numpy.random.seed(value)
    except ImportError:
        pass
    import torch

    torch.manual_seed(value)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    value = example_seed(item.nodeid)
    _seed_globals(value)
    if item.config.getoption("hypothesis_seed", default=None) is not None:
        return  # the user asked for another seed on the command line
    function = getattr(item, "obj", None)
    if function is not None:
        seed_hypothesis_test(function, value)
