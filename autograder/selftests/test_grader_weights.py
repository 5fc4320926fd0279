"""Per-test weights: in each FlashAttention-2 problem, correctness carries at least 80% of the
points and input validation at most 10%; in optimizer_state_sharding, the tests of groups with
fewer parameters than ranks carry at least 25%.

Staff only. Points of a problem are shared among its tests (visible and hidden, GPU ones too) in
proportion to the weights of autograder/manifest.toml (``weights`` patterns, 1 by default);
autograder/scoring.py applies them. This collects every test of the FlashAttention-2 problems
and adds up the shares: "validation" tests are the bad-input ones; "correctness" tests compare
outputs or gradients with the truth (all others but the saved-tensor structure checks).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.manifest import load_manifest
from autograder.watchdog import Verdict
from autograder.scoring import GradedTest, _apportion

KIT = Path(__file__).resolve().parents[2]
MANIFEST = load_manifest()
FLASH_PROBLEMS = ("flash_forward_pytorch", "flash_forward_triton", "flash_backward")
VALIDATION = "rejects_bad_input"
STRUCTURE = ("saved_tensors",)  # checks what is saved (values too, but the point is the structure)


@pytest.fixture(scope="module")
def collected() -> list[str]:
    """Node ids of every visible and hidden FlashAttention-2 test."""
    files = sorted(str(path.relative_to(KIT)) for folder in ("tests", "autograder/hidden_tests")
                   for path in (KIT / folder).glob("test_flash_*.py"))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--submission", "reference", *files], cwd=KIT, capture_output=True, text=True, timeout=300)
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    assert ids, f"collected nothing:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return ids


def _shares(problem_name: str, ids: list[str]) -> dict[str, float]:
    """{"validation" | "structure" | "correctness": share of the problem's points}."""
    problem = MANIFEST.by_name[problem_name]
    weights = {"validation": 0.0, "structure": 0.0, "correctness": 0.0}
    for nodeid in ids:
        path, _, name = nodeid.partition("::")
        if MANIFEST.problem_of_file(Path(path).name) is not problem:
            continue
        kind = ("validation" if VALIDATION in name else
                "structure" if any(word in name for word in STRUCTURE) else "correctness")
        weights[kind] += problem.weight_of(f"{Path(path).name}::{name}")
    total = sum(weights.values())
    assert total > 0, f"no tests for {problem_name}"
    return {kind: weight / total for kind, weight in weights.items()}


@pytest.mark.parametrize("problem", FLASH_PROBLEMS)
def test_correctness_carries_80_percent_and_validation_at_most_10(collected, problem):
    shares = _shares(problem, collected)
    assert shares["correctness"] >= 0.80, f"{problem}: correctness carries only {shares}"
    assert shares["validation"] <= 0.10, f"{problem}: input validation carries {shares}"


def test_validation_tests_are_still_graded(collected):
    """The weights shrink validation's share; they never drop it to 0."""
    for problem in ("flash_forward_pytorch", "flash_forward_triton"):
        assert _shares(problem, collected)["validation"] > 0.02, problem


FEWER_THAN_RANKS = ("fewer_parameters_than_ranks", "group_added_later_on_three_ranks[chain-1-1]")
"""The optimizer_state_sharding tests whose first or later group has fewer parameters than ranks."""


def test_fewer_parameters_than_ranks_carries_a_real_share():
    """A sharded optimizer that crashes when some rank owns nothing of a group loses at least 25% of §3.6."""
    files = ["tests/test_optimizer_state_sharding.py", "autograder/hidden_tests/test_optimizer_state_sharding_hidden.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--submission", "reference", *files], cwd=KIT, capture_output=True, text=True, timeout=300)
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    assert ids, f"collected nothing:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    problem = MANIFEST.by_name["optimizer_state_sharding"]
    weight = {nodeid: problem.weight_of(f"{Path(nodeid.partition('::')[0]).name}::{nodeid.partition('::')[2]}")
              for nodeid in ids}
    fewer = sum(w for nodeid, w in weight.items() if any(key in nodeid for key in FEWER_THAN_RANKS))
    share = fewer / sum(weight.values())
    assert 0.25 <= share <= 0.5, f"the fewer-parameters-than-ranks tests carry {share:.0%} of optimizer_state_sharding"


def test_each_test_gets_the_same_share_whatever_order_the_tests_finished_in(collected):
    """Tests of a grade finish in a different order each time (chains share them out as they run).
    A problem's points are shared in 1e-4 steps, the leftover steps by largest remainder; equal
    remainders must not go by that order, or one test shows 0.3226 in one grade and 0.3225 in the
    next (seen on an H200 on 2026-12-03)."""
    problem = MANIFEST.by_name["flash_forward_triton"]
    mine = [nodeid for nodeid in collected if MANIFEST.problem_of_file(Path(nodeid.partition("::")[0]).name) is problem]
    shares = []
    for seed in range(3):
        tests = [GradedTest(problem, "hidden" if "hidden" in nodeid else "visible", nodeid, Verdict(nodeid, "passed", ""))
                 for nodeid in mine]
        for test in tests:
            test.weight = problem.weight_of(test.key)  # as scoring.collect_tests sets it
        random.Random(seed).shuffle(tests)
        _apportion(tests, problem.points)
        shares.append({test.nodeid: test.max_score for test in tests})
        assert round(sum(shares[-1].values()), 4) == problem.points
    assert len({step for share in shares for step in share.values()}) > 1, "all shares equal: nothing to tie-break"
    assert shares[0] == shares[1] == shares[2]
