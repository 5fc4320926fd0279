"""The course secret travels with the course: the GPU batch grades with the Gradescope bundle's secret.

The secret chooses every hidden case's inputs and every visible Hypothesis example, so a batch
that grades with another secret gives other verdicts than Gradescope gave. The submission here
is the reference with a value-dependent bug (its PyTorch FlashAttention output is wrong whenever
the first element of Q exceeds 1), so which tests fail depends on the inputs drawn, and hence on
the secret: the test first shows that two secrets give it different verdicts (else the rest
could not fail). Then: ``grade`` under the bundle's secret and ``batch --bundle`` give the same
verdict on every test; a batch with another secret regrades instead of skipping; a batch with
no secret refuses, saying where the secret is, and writes no scores.csv. One problem only
(flash_forward_pytorch), on the CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.bundle import SEED_FILE, build_bundle

KIT = Path(__file__).resolve().parents[2]
PROBLEM = "flash_forward_pytorch"
BUNDLE_SECRET = "course-secret-of-the-bundle"
OTHER_SECRET = "another-course-secret"
FLAKY = '''

def get_flashattention_autograd_function_pytorch():
    """The reference's class, made wrong for inputs whose first element of Q exceeds 1."""
    from cs336_systems.flash_attention_pytorch import FlashAttentionPytorch

    class ValueDependentBug(FlashAttentionPytorch):
        @staticmethod
        def forward(ctx, Q, K, V, is_causal=False):
            O = FlashAttentionPytorch.forward(ctx, Q, K, V, is_causal)
            return O + 1 if float(Q.reshape(-1)[0]) > 1.0 else O

    return ValueDependentBug
'''


def _env(secret: str | None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "CS336_HIDDEN_SEED"}
    if secret is not None:
        env["CS336_HIDDEN_SEED"] = secret
    return env


def _run(argv: list[str], secret: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *argv], cwd=KIT, env=_env(secret),
                          capture_output=True, text=True, timeout=900)


def _verdicts(results: Path) -> dict[str, str]:
    return {test["name"]: test["status"] for test in json.loads(results.read_text())["tests"]}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    root.chmod(0o755)
    submission = root / "export" / "submission_1"
    shutil.copytree(KIT / "reference", submission, ignore=shutil.ignore_patterns("__pycache__"))
    with (submission / "adapters.py").open("a") as handle:
        handle.write(FLAKY)
    (root / "export" / "submission_metadata.yml").write_text(
        "submission_1:\n  :submitters:\n  - :name: Ada Lovelace\n    :sid: '05550101'\n"
        "    :email: ada@stanford.edu\n  :status: processed\n")
    bundle = build_bundle(root / "gradescope_autograder.zip", secret=BUNDLE_SECRET)
    graded = {}
    for name, secret in (("bundle", BUNDLE_SECRET), ("other", OTHER_SECRET)):
        result = _run(["grade", str(submission), "--problems", PROBLEM, "--out", str(root / f"grade-{name}"), "-q"],
                      secret)
        assert result.returncode == 0, result.stderr[-3000:]
        graded[name] = _verdicts(root / f"grade-{name}" / "results.json")
    return root, bundle, graded


def _batch(root: Path, out: str, *flags: str, secret: str | None = None) -> subprocess.CompletedProcess:
    return _run(["batch", str(root / "export"), "--out", str(root / out), "--problems", PROBLEM, "--gpus", "0",
                 "--jobs", "1", "--partial", *flags], secret)


def test_the_secret_changes_this_submissions_verdicts(course):
    """Without this, the tests below could not tell the bundle's secret from any other."""
    _, _, graded = course
    assert graded["bundle"].keys() == graded["other"].keys()
    assert graded["bundle"] != graded["other"], "two secrets gave the same verdicts: pick other secrets"


def test_a_batch_from_the_bundle_gives_the_grades_verdicts_and_another_secret_regrades(course):
    root, bundle, graded = course
    first = _batch(root, "out", "--bundle", str(bundle))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    results = root / "out" / "submissions" / "submission_1" / "results.json"
    assert _verdicts(results) == graded["bundle"]
    record = (root / "out" / "submissions" / "submission_1" / "batch.json").read_text()
    assert BUNDLE_SECRET not in record and "secret_digest" in record, record
    assert BUNDLE_SECRET not in (root / "out" / "submissions" / "submission_1" / "grade.log").read_text()
    assert (root / "out" / "scores.csv").exists()

    again = _batch(root, "out", secret=BUNDLE_SECRET)  # the same secret, from the environment: nothing to do
    assert again.returncode == 0 and "1 already graded" in again.stdout, again.stdout[-2000:]
    other = _batch(root, "out", "--secret", OTHER_SECRET)
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    assert "0 already graded" in other.stdout, other.stdout[-2000:]
    assert _verdicts(results) == graded["other"]


def test_a_batch_without_the_secret_refuses_and_says_where_it_is(course):
    root, bundle, _ = course
    refused = _batch(root, "none")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bundle" in lines[0] and SEED_FILE in lines[0], refused.stderr
    assert not (root / "none" / "scores.csv").exists() and not (root / "none" / "submissions").exists()
    clash = _batch(root, "none", "--bundle", str(bundle), "--secret", OTHER_SECRET)
    assert clash.returncode == 2 and "different course secrets" in clash.stderr, clash.stderr
    bad = _batch(root, "none", "--bundle", str(root / "export" / "submission_metadata.yml"))
    assert bad.returncode == 2 and "bundle" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
