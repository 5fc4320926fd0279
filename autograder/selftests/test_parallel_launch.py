"""``executor/probes/parallel_launch.launch``: what counts as a rank failing.

A rank that saved its result and then died in the teardown (gloo's threads can abort there)
did its part, and the ranks still working must be left to finish: stopping them failed a
part-2 test at random on a loaded machine; one that hangs there after its report is no hang of
the run. A rank that raises, or dies before reporting (its signal named), still stops the others fast.
"""

from __future__ import annotations

import time
from pathlib import Path

from executor.probes.parallel_launch import launch

KIT = Path(__file__).resolve().parents[2]


def _reference_adapters():
    import types

    return types.SimpleNamespace(__file__=str(KIT / "reference" / "adapters.py"))


def test_a_rank_dying_after_its_result_does_not_stop_the_others():
    run = launch(_reference_adapters, "autograder.selftests.rank_jobs.abort_in_teardown_on_rank0", 2, {},
                 timeout_s=60.0)
    assert run["errors"] == {}, run["errors"]
    assert [rank["value"] for rank in run["ranks"]] == [0, 1]


def test_a_rank_that_raises_stops_the_others_within_seconds():
    start = time.monotonic()
    run = launch(_reference_adapters, "autograder.selftests.rank_jobs.fail_on_rank0", 2, {}, timeout_s=60.0)
    assert time.monotonic() - start < 30.0
    assert "rank 0 broke" in run["errors"][0]
    assert "stopped after another rank failed" in run["errors"][1]
    assert not run["timed_out"]


def test_a_rank_killed_before_reporting_fails_with_its_signal():
    start = time.monotonic()
    run = launch(_reference_adapters, "autograder.selftests.rank_jobs.abort_before_reporting_on_rank0", 2, {},
                 timeout_s=60.0)
    assert time.monotonic() - start < 30.0
    assert "SIGABRT" in run["errors"][0] and "before it reported" in run["errors"][0], run["errors"]
    assert "stopped after another rank failed" in run["errors"][1]
    assert not run["timed_out"]


def test_a_rank_hanging_in_teardown_after_its_result_is_not_a_hang():
    start = time.monotonic()
    run = launch(_reference_adapters, "autograder.selftests.rank_jobs.hang_in_teardown_on_rank0", 2, {},
                 timeout_s=60.0)
    assert time.monotonic() - start < 30.0
    assert run["errors"] == {} and not run["timed_out"], run
    assert [rank["value"] for rank in run["ranks"]] == [0, 1]
