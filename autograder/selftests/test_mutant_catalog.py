"""The hidden FlashAttention-2 tests catch every mutant, and pass the correct base they come from.

Staff only (part of the kit's self-check: plain `pytest` at the repo root). Proves both
directions for the FlashAttention-2 mutants of fixtures/mutants:

- the catalog is well formed: each edit's snippet occurs exactly once in the base, names are
  unique, every ``caught_by`` test exists and together they cover the problems in ``breaks``;
- the base submission passes every hidden FlashAttention-2 test (so a failing mutant fails
  because of its one mistake);
- every mutant fails each hidden test in its ``caught_by`` (``gpu_only`` mutants: only where
  CUDA is present, since the CPU interpreter hides them).

Each submission runs in its own pytest process, as the grader runs them: all runs are started
once per session, two at a time, by fixtures/mutants/run_jobs.py (which forks them
from a warm parent on a CPU), and each test then reads the verdicts of its run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fixtures import apply_edits, materialize
from fixtures.mutants import BASE_DIR, DISTRIBUTED_MUTANTS, HIDDEN_FLASH_FILES, MUTANTS
from harness import gpus

KIT = Path(__file__).resolve().parents[2]
FLASH_PROBLEMS = ("flash_forward_pytorch", "flash_forward_triton", "flash_backward")
CUDA = gpus.count() > 0
MIN_CPU_MUTANTS = 15
WORKERS = 2
# CS336_MUTANTS=name,name runs only those mutants, and the base only on their caught_by tests
# (a quick GPU check of the gpu_only ones); unset, everything runs. Names of data-parallel
# mutants are run by test_distributed_mutants.py instead.
ONLY = [name for name in os.environ.get("CS336_MUTANTS", "").split(",") if name]


def _problem_of(nodeid: str) -> str:
    """The problem a hidden test belongs to: the longest problem name its file name starts with."""
    file = nodeid.split("::")[0].rsplit("/", 1)[-1]
    matches = [p for p in FLASH_PROBLEMS if file.startswith(f"test_{p}")]
    return max(matches, key=len) if matches else ""


def _outcomes(report: Path, log: Path) -> dict[str, str]:
    """{nodeid: "passed" | "failed" | "skipped"} from a JUnit report; AssertionError if it is missing."""
    if not report.exists():
        output = log.read_text()[-4000:] if log.exists() else "(no output)"
        raise AssertionError(f"pytest wrote no report {report.name}; its output:\n{output}")
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[nodeid] = "failed"
        elif case.find("skipped") is not None:
            outcomes[nodeid] = "skipped"
        else:
            outcomes[nodeid] = "passed"
    return outcomes


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Run the base on every hidden FlashAttention-2 test and each checkable mutant on its
    caught_by tests, WORKERS at a time; return {"base" or mutant name: outcomes}."""
    root = tmp_path_factory.mktemp("mutant_runs")
    unknown = set(ONLY) - {m.name for m in MUTANTS} - {m.name for m in DISTRIBUTED_MUTANTS}
    assert not unknown, f"CS336_MUTANTS names unknown mutants {sorted(unknown)}"
    chosen = [m for m in MUTANTS if m.name in ONLY] if ONLY else MUTANTS
    if not chosen:
        pytest.skip("CS336_MUTANTS names only data-parallel mutants: test_distributed_mutants.py runs those")
    base_targets = sorted({node for m in chosen for node in m.verdict.caught_by}) if ONLY else list(HIDDEN_FLASH_FILES)
    jobs = [{"name": "base", "submission": str(BASE_DIR), "targets": base_targets}]
    for mutant in chosen:
        if CUDA or not mutant.verdict.gpu_only:
            jobs.append({"name": mutant.name, "submission": str(materialize(mutant, root / mutant.name)),
                         "targets": list(mutant.verdict.caught_by)})
    for job in jobs:
        job["report"] = str(root / f"{job['name']}.xml")
        job["log"] = str(root / f"{job['name']}.log")
    (root / "jobs.json").write_text(json.dumps(jobs))
    command = [sys.executable, "-m", "fixtures.mutants.run_jobs", str(root / "jobs.json"),
               "--workers", str(WORKERS)] + ([] if CUDA else ["--fork"])
    env = {k: v for k, v in os.environ.items() if k != "CS336_SUBMISSION"}
    done = subprocess.run(command, cwd=KIT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"a pytest job crashed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return {job["name"]: _outcomes(Path(job["report"]), Path(job["log"])) for job in jobs}


def test_catalog_is_well_formed(runs):
    if ONLY:
        pytest.skip("CS336_MUTANTS is set: the base ran only the chosen mutants' tests")
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)), f"duplicate mutant names: {sorted(n for n in names if names.count(n) > 1)}"
    cpu_visible = [m.name for m in MUTANTS if not m.verdict.gpu_only]
    assert len(cpu_visible) >= MIN_CPU_MUTANTS, f"only {len(cpu_visible)} mutants are caught on a CPU: {cpu_visible}"
    collected = set(runs["base"])
    for mutant in MUTANTS:
        for file in {edit.file for edit in mutant.edits}:
            apply_edits((BASE_DIR / file).read_text(), [e for e in mutant.edits if e.file == file], file)
        assert mutant.verdict.breaks and set(mutant.verdict.breaks) <= set(FLASH_PROBLEMS), f"{mutant.name}: breaks {mutant.verdict.breaks}"
        missing = [node for node in mutant.verdict.caught_by if node not in collected]
        assert not missing, f"{mutant.name}: caught_by names tests that do not exist: {missing}"
        covered = {_problem_of(node) for node in mutant.verdict.caught_by}
        assert covered >= set(mutant.verdict.breaks), (
            f"{mutant.name}: breaks {mutant.verdict.breaks} but caught_by only covers {sorted(covered)}"
        )


def test_base_passes_every_hidden_flash_test(runs):
    outcomes = runs["base"]
    if ONLY and outcomes and all(outcome == "skipped" for outcome in outcomes.values()):
        pytest.skip("the chosen mutants' tests all need a GPU")
    failed = sorted(node for node, outcome in outcomes.items() if outcome == "failed")
    assert any(outcome == "passed" for outcome in outcomes.values()), "no hidden FlashAttention-2 test ran"
    assert not failed, f"the correct base submission fails hidden tests: {failed}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_fails_its_hidden_tests(mutant, runs):
    if ONLY and mutant.name not in ONLY:
        pytest.skip(f"not among CS336_MUTANTS={','.join(ONLY)}")
    if mutant.verdict.gpu_only and not CUDA:
        pytest.skip(f"{mutant.name} is invisible under the CPU interpreter (gpu_only); run on a GPU")
    outcomes = runs[mutant.name]
    not_failed = {node: outcomes.get(node, "not run") for node in mutant.verdict.caught_by if outcomes.get(node) != "failed"}
    assert not not_failed, (
        f"mutant {mutant.name} ({mutant.summary}) was not caught by {not_failed}; "
        "the hidden tests must fail on it"
    )
