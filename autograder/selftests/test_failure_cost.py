"""A wrong submission costs the grader no more time than a right one, in the Triton shape-fuzz tests.

Read by staff changing the shape-fuzz tests (tests/test_flash_forward_triton.py,
tests/test_flash_backward.py), their first case (harness/flash_cases.py ``first_case``) or the
Hypothesis profiles (harness/hypothesis_profiles.py). Issue 39 measured, on an H200, one-bug
copies of a correct Triton backward grading in up to 4.8 times the correct copy's time; on a CPU
(2026-12-05, 2 cores, load 1.8-3.2) ``backward_scale_one_over_d`` spent 69 s of CPU in
``test_flash_backward_triton_any_shape`` against 4-5 s for the correct base: Hypothesis found the
bug, then shrank it, each shrink step one more call of the interpreted kernels (on a GPU, one more
compile). Trying a small case first ends the test there for most bugs.

Each submission below is graded on one fuzz test, as the grader grades it (its own test process,
executor and replay), and the test's charged time is read from ``grade --timeline`` (the CPU
seconds of its process tree, harness/cpu_clock.py: a busy machine stretches the wall clock,
not this). A mutant must cost at most ``FACTOR`` times the correct base plus ``SLACK_S`` on the test
its bug fails, and still fail it. Runs on a CPU (about 90 s: five one-test grades).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from fixtures import materialize, mutants
from fixtures.mutants import BASE_DIR

FORWARD = "tests/test_flash_forward_triton.py::test_flash_forward_triton_any_shape"
BACKWARD = "tests/test_flash_backward.py::test_flash_backward_triton_any_shape"
# (mutant, the fuzz test its bug fails): the three Triton backward bugs, and a forward one.
CASES = (
    ("backward_scale_one_over_d", BACKWARD),
    ("backward_dO_treated_as_ones", BACKWARD),
    ("delta_from_dO_only", BACKWARD),
    ("causal_bottom_right", FORWARD),
)
FACTOR = 1.5
SLACK_S = 2.0


def charged_seconds(timeline: Path, nodeid: str) -> float:
    """The CPU seconds the grade charged ``nodeid``: its one ``end`` event of a ``grade --timeline``
    file. AssertionError when the test has no such event, or more than one."""
    ends = [event for event in map(json.loads, timeline.read_text().splitlines())
            if event.get("event") == "end" and event.get("nodeid") == nodeid]
    assert len(ends) == 1, f"expected one end of {nodeid} in {timeline}; found {len(ends)}"
    assert ends[0].get("cpu") is not None, f"{timeline} has no CPU time for {nodeid}: /proc unreadable?"
    return float(ends[0]["cpu"])


def _graded(submission: Path, nodeid: str, out: Path) -> tuple[str, float]:
    """(the test's status in results.json, its charged seconds) for a grade of one test."""
    timeline = out.with_suffix(".timeline")
    grade(GradeOptions(submission=submission, out=out, tests=[nodeid], timeline=timeline, quiet=True))
    results = json.loads((out / "results.json").read_text())
    name = nodeid.split("/")[-1]
    statuses = [test.get("status") for test in results["tests"] if test["name"].endswith(name)]
    assert len(statuses) == 1, f"expected one result for {name} in {out / 'results.json'}; found {statuses}"
    return statuses[0], charged_seconds(timeline, nodeid)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("failure_cost")
    folder.chmod(0o755)  # the executor's own user copies the submission from here
    return folder


@pytest.fixture(scope="module")
def base_seconds(root) -> dict[str, float]:
    """{fuzz test: the correct base's charged seconds on it}; the base must pass both."""
    seconds = {}
    for nodeid in sorted({nodeid for _, nodeid in CASES}):
        status, seconds[nodeid] = _graded(BASE_DIR, nodeid, root / f"base-{nodeid.split('::')[-1]}")
        assert status == "passed", f"the correct base fails {nodeid}: it cannot be the yardstick"
    return seconds


@pytest.mark.parametrize("name,nodeid", CASES, ids=[name for name, _ in CASES])
def test_a_failing_mutant_costs_no_more_than_the_correct_base(name, nodeid, root, base_seconds):
    status, seconds = _graded(materialize(mutants.get(name), root / name), nodeid, root / f"out-{name}")
    assert status == "failed", f"{name} must fail {nodeid}; it {status}"
    bound = FACTOR * base_seconds[nodeid] + SLACK_S
    assert seconds <= bound, (
        f"{name} was charged {seconds:.1f} s in {nodeid}, over {FACTOR} x the correct base's "
        f"{base_seconds[nodeid]:.1f} s + {SLACK_S:.0f} s = {bound:.1f} s: a wrong submission must not cost the "
        "grader more than a right one (is the fuzz test still trying first_case before it searches and shrinks?)"
    )


def test_charged_seconds_reads_one_end_event(tmp_path):
    timeline = tmp_path / "timeline.jsonl"
    events = [{"event": "start", "nodeid": "a"}, {"event": "end", "nodeid": "a", "cpu": 3.5},
              {"event": "end", "nodeid": "b", "cpu": None}]
    timeline.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    assert charged_seconds(timeline, "a") == 3.5
    with pytest.raises(AssertionError, match="no CPU time"):
        charged_seconds(timeline, "b")
    with pytest.raises(AssertionError, match="found 0"):
        charged_seconds(timeline, "c")
