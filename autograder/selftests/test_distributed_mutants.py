"""The hidden part-2 tests catch every data-parallel mutant of the catalog.

Staff only (part of the kit's self-check). Each mutant of
``fixtures.mutants.DISTRIBUTED_MUTANTS`` is a copy of reference/ with one
realistic mistake (a missing division, no broadcast, an all-reduce at the end instead of
overlapped, a bucket boundary off by one, an optimizer that never broadcasts, FSDP master
weights in 16 bits, ...). Each runs its ``caught_by`` tests (hidden ones, or a graded visible
one) in its own pytest process, two at a time (fixtures/mutants/run_jobs.py, forked from a warm
parent on a CPU),
and every one of those tests must fail. That the reference passes them is
test_submission_contract.py's job. ``CS336_MUTANTS=name,name`` runs only those mutants (as in
test_mutant_catalog.py); names of FlashAttention-2 mutants are ignored here. A ``gpu_only``
mutant (a buffer on the default device, which only NCCL refuses) runs only where CUDA is
present, on its one-GPU ``caught_by`` tests; on a CPU it is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.mutants import DISTRIBUTED_MUTANTS
from autograder.manifest import load_manifest
from autograder.selftests.test_mutant_catalog import ONLY, _outcomes
from harness import gpus

KIT = Path(__file__).resolve().parents[2]
MIN_MUTANTS = 10
CUDA = gpus.count() > 0
CHOSEN = [m for m in DISTRIBUTED_MUTANTS if (not ONLY or m.name in ONLY) and (CUDA or not m.verdict.gpu_only)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, str]]:
    """{mutant name: {nodeid: outcome}} for each mutant run on its caught_by tests."""
    root = tmp_path_factory.mktemp("distributed_mutants")
    jobs = []
    for mutant in CHOSEN:
        jobs.append({"name": mutant.name, "submission": str(materialize(mutant, root / mutant.name)),
                     "targets": list(_targets(mutant)), "report": str(root / f"{mutant.name}.xml"),
                     "log": str(root / f"{mutant.name}.log")})
    (root / "jobs.json").write_text(json.dumps(jobs))
    command = [sys.executable, "-m", "fixtures.mutants.run_jobs", str(root / "jobs.json"),
               "--workers", "2"] + ([] if gpus.count() else ["--fork"])
    env = {k: v for k, v in os.environ.items() if k != "CS336_SUBMISSION"}
    done = subprocess.run(command, cwd=KIT, env=env, capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, f"a pytest job crashed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return {job["name"]: _outcomes(Path(job["report"]), Path(job["log"])) for job in jobs}


def _targets(mutant) -> tuple[str, ...]:
    """The tests ``mutant`` must fail here: its caught_by, and its NCCL tests where two GPUs are present."""
    two_gpus = gpus.count() >= 2
    return mutant.verdict.caught_by + (mutant.verdict.caught_on_gpus_by if two_gpus else ())


def test_distributed_catalog_is_well_formed():
    names = [m.name for m in DISTRIBUTED_MUTANTS]
    assert len(names) >= MIN_MUTANTS, f"only {len(names)} data-parallel mutants: {names}"
    assert len(names) == len(set(names)), f"duplicate mutant names: {names}"
    manifest = load_manifest()
    for mutant in DISTRIBUTED_MUTANTS:
        covered = {manifest.problem_of_file(node.split("::")[0].rsplit("/", 1)[-1]).name
                   for node in mutant.verdict.caught_by + mutant.verdict.caught_on_gpus_by}
        assert covered >= set(mutant.verdict.breaks), f"{mutant.name}: breaks {mutant.verdict.breaks}, caught_by covers {covered}"


@pytest.mark.parametrize("mutant", DISTRIBUTED_MUTANTS, ids=[m.name for m in DISTRIBUTED_MUTANTS])
def test_distributed_mutant_fails_its_hidden_tests(mutant, runs):
    if mutant.verdict.gpu_only and not CUDA:
        pytest.skip(f"{mutant.name} shows only on a GPU (gpu_only): its caught_by tests need CUDA")
    if mutant not in CHOSEN:
        pytest.skip(f"not among CS336_MUTANTS={','.join(ONLY)}")
    outcomes = runs[mutant.name]
    not_failed = {node: outcomes.get(node, "not run (no such test?)") for node in _targets(mutant)
                  if outcomes.get(node) != "failed"}
    assert not not_failed, f"mutant {mutant.name} ({mutant.summary}) was not caught by {not_failed}"
