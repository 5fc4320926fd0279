"""The timer checks of §1.1 reject the two classic timing bugs and accept a correct timer.

The checks in tests/checks/timing_checks.py are what the visible and hidden tests run on a student's
``time_steps``; here they run on autograder/selftests/broken_harnesses.py.
"""

from __future__ import annotations

import pytest

from autograder.selftests import broken_harnesses
from tests.checks import timing_checks

REJECTED_BY = {
    "times_warmup": [timing_checks.check_excludes_warmup, timing_checks.check_real_sync_is_timed],
    "syncs_outside": [timing_checks.check_sync_inside_timed_region, timing_checks.check_real_sync_is_timed],
}


@pytest.mark.parametrize(
    ("timer", "check"),
    [(timer, check) for timer, checks in REJECTED_BY.items() for check in checks],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_check_rejects_broken_timer(timer, check):
    with pytest.raises(AssertionError):
        check(getattr(broken_harnesses, timer))


@pytest.mark.parametrize("check", timing_checks.ALL_CHECKS, ids=lambda check: check.__name__)
def test_check_accepts_a_correct_timer(check):
    check(broken_harnesses.correct)
