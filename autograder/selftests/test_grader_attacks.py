"""Every attack in fixtures/attacks gets the verdict its FIXTURE.toml states.

Each attack is graded once (on the problems it names only; where it has a ``keyword``, on the
tests that selects; two at a time when this file runs alone, one at a time beside another file),
and every check below reads those reports: a valid results.json, 0 on every attacked test, full
marks on the control problems, the promised words in the messages, the files left out of the
sandbox, and no text of the hidden tests or the reference in what a student sees.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.attacks import ATTACKS, KIT
from autograder.grade import GradeOptions, grade
from autograder.selftests.conftest import side_by_side
from autograder.selftests.gradescope_schema import problems_with

NAMES = [attack.name for attack in ATTACKS]
SECRET_SEED = "attack-selftest-secret-" + os.urandom(6).hex()  # the hidden seed while attacks are graded


@pytest.fixture(scope="module")
def attack_grades():
    """{attack name: (attack, GradeReport, results.json as written)}, graded once per session."""
    root = Path(tempfile.mkdtemp(prefix="attack-grades-"))
    root.chmod(0o755)
    previous = os.environ.get("CS336_HIDDEN_SEED")
    os.environ["CS336_HIDDEN_SEED"] = SECRET_SEED

    def run(attack):
        submission = materialize(attack, root / attack.name / "submission")
        out = root / attack.name / "out"
        report = grade(GradeOptions(submission=submission, out=out, problems=list(attack.verdict.problems),
                                    keyword=attack.verdict.keyword, test_timeout_s=attack.verdict.test_timeout,
                                    quiet=True, jobs=2))
        return attack.name, (attack, report, json.loads((out / "results.json").read_text()))

    try:
        with ThreadPoolExecutor(max_workers=side_by_side()) as pool:
            yield dict(pool.map(run, ATTACKS))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if previous is None:
            os.environ.pop("CS336_HIDDEN_SEED", None)
        else:
            os.environ["CS336_HIDDEN_SEED"] = previous


def _entries(results: dict, problem: str) -> list[dict]:
    return [entry for entry in results["tests"] if f" {problem} [" in entry["name"]]


def test_the_catalog_is_not_empty():
    assert len(ATTACKS) >= 10, NAMES


def test_a_keyword_narrows_only_the_attacked_tests():
    """An attack's ``keyword`` may leave out tests of its attacked problems, never of its control
    problems: each control problem is one of its alternatives (-k matches a test's file name)."""
    for attack in ATTACKS:
        if attack.verdict.keyword:
            alternatives = {part.strip() for part in attack.verdict.keyword.split(" or ")}
            missing = [problem for problem in attack.verdict.control if problem not in alternatives]
            assert not missing, f"{attack.name}: keyword {attack.verdict.keyword!r} must select all of {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_attack_gets_its_verdict(attack_grades, name):
    attack, report, written = attack_grades[name]
    if attack.verdict.needs_sandbox and report.executor_user is None:
        pytest.skip("only the unprivileged sandbox user stops this attack; grade as root to check it")
    assert problems_with(written) == [], "results.json must stay valid"
    assert written == report.results, "results.json must be the grader's, not the submission's"
    for problem in attack.verdict.attacked:
        entries = _entries(written, problem)
        assert entries, f"no test of {problem} was graded"
        earned = [entry["name"] for entry in entries if entry["score"] > 0 or entry["status"] == "passed"]
        assert not earned, f"{name} earned points on {earned}"
    for pattern in attack.verdict.attacked_tests:
        entries = [entry for entry in written["tests"] if fnmatch.fnmatch(entry["name"], pattern)]
        assert entries, f"no graded test matches {pattern!r}"
        earned = [entry["name"] for entry in entries if entry["score"] > 0 or entry["status"] == "passed"]
        assert not earned, f"{name} earned points on {earned}"
    for problem in attack.verdict.control:
        entries = _entries(written, problem)
        lost = [(e["name"], e["output"][:300]) for e in entries if e["status"] != "passed"]
        later = written["extra_data"]["problems"].get(problem, {}).get("gpu_later", 0)
        assert (entries or later) and not lost, f"{name} must cost only the attacked tests; control tests lost: {lost}"
    outputs = "\n".join([entry["output"] for problem in attack.verdict.attacked for entry in _entries(written, problem)]
                        + [entry["output"] for entry in written["tests"]
                           if any(fnmatch.fnmatch(entry["name"], pattern) for pattern in attack.verdict.attacked_tests)])
    for word in attack.verdict.expect_output:
        assert word in outputs, f"no attacked test's message mentions {word!r}:\n{outputs[:2000]}"
    for item in attack.verdict.left_out:
        assert any(line.startswith(item) for line in report.intake.left_out), (item, report.intake.left_out)
    text = json.dumps(written)
    assert SECRET_SEED not in text, "the hidden seed leaked into results.json"
    for relative in attack.verdict.secret_files:
        secret_lines = [line.strip() for line in (KIT / relative).read_text().splitlines() if len(line.strip()) > 30]
        leaked = [line for line in secret_lines if json.dumps(line)[1:-1] in text]
        assert not leaked, f"{relative} leaked into results.json: {leaked[:3]}"
