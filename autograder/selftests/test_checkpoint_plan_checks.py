"""§1.7's checks catch wrong strategies: a one-level sqrt(N) plan (on the memory model, and handed in as a
student's submission), a plan that drops a layer, one that recomputes too much."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from autograder.selftests.test_training_step_cheats import run_tests
from tests.checks.checkpoint_plans import check_plan, forwards, peak

KIT = Path(__file__).resolve().parents[2]
KIT_REFERENCE = "reference"


def one_level(n: int):
    """The one-level optimum of §1.6: groups of about sqrt(N) (peak near 2 sqrt(N))."""
    k = max(1, round(math.sqrt(n)))
    return [min(k, n - start) for start in range(0, n, k)]


def test_the_reference_plan_meets_the_bounds():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / KIT_REFERENCE / "cs336_systems" / "nested_checkpointing.py"
    spec = importlib.util.spec_from_file_location("reference_nested", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for n in list(range(1, 301)) + [1023, 1024, 4096]:
        check_plan(module.nested_checkpoint_plan(n), n)
    assert peak(module.nested_checkpoint_plan(1024)) == 11 and forwards(module.nested_checkpoint_plan(1024)) == 10240


def test_a_one_level_plan_fails_the_log_bound():
    with pytest.raises(AssertionError, match="O\\(log N\\)"):
        check_plan(one_level(1024), 1024)
    check_plan(one_level(16), 16)  # small chains cannot tell them apart: the hidden tests use long ones


@pytest.mark.parametrize(("plan", "message"), [([3, [2, 2]], "covers 7 layers"), ([0, 8], "at least one layer"),
                                               ([], "at least one member"), (8.0, "an int >= 1")])
def test_malformed_plans_are_named(plan, message):
    with pytest.raises(AssertionError, match=message):
        check_plan(plan, 8)


def test_a_plan_that_recomputes_too_much_fails():
    def chain(n):  # each level peels the last layer off: peak 2, but about N^2 / 2 forwards
        return 1 if n == 1 else [chain(n - 1), 1]

    with pytest.raises(AssertionError, match="forwards"):
        check_plan(chain(60), 60)


ONE_LEVEL_STUDENT = '''"""A wrong §1.7 answer: §1.6's one-level optimum, groups of about sqrt(N)."""

import math
from pathlib import Path


def nested_checkpoint_plan(num_layers):
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be an int >= 1; got {num_layers!r}")
    k = max(1, round(math.sqrt(num_layers)))
    return [min(k, num_layers - start) for start in range(0, num_layers, k)]
'''


def test_the_visible_and_hidden_tests_fail_a_one_level_submission(tmp_path):
    """A student who hands in the one-level plan, run through §1.7's visible and hidden tests in the
    executor as the grader runs them: the short chains cannot tell, every chain of 64 layers or more
    fails, and the message names the O(log N) bound."""
    submission = tmp_path / "one_level"
    shutil.copytree(KIT / KIT_REFERENCE, submission, symlinks=False)
    (submission / "cs336_systems" / "nested_checkpointing.py").write_text(ONE_LEVEL_STUDENT)
    outcomes = run_tests(submission, ["tests/test_nested_checkpointing.py",
                                      "autograder/hidden_tests/test_nested_checkpointing_hidden.py"],
                         tmp_path / "report.xml")
    failed = sorted(name for name, message in outcomes.items() if message)
    assert failed == ["test_nested_plan_for_every_count_to_300", "test_nested_plan_for_long_chains[1023]",
                      "test_nested_plan_for_long_chains[1024]", "test_nested_plan_for_long_chains[4096]",
                      "test_nested_plan_meets_the_log_bound[100]", "test_nested_plan_meets_the_log_bound[64]"], outcomes
    assert all("O(log N)" in outcomes[name] for name in failed), outcomes
