"""The Gradescope bundle holds the grader and its entry points, and run_autograder always leaves a
valid results.json (here in a fake /autograder tree, reusing this kit's .venv)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from autograder.bundle import build_bundle
from autograder.selftests.gradescope_schema import problems_with

KIT = Path(__file__).resolve().parents[2]
QUICK_TEST = "tests/test_nsys_profile.py::test_annotated_attention_pushes_the_three_ranges_in_order"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_bundle(tmp_path_factory.mktemp("bundle") / "autograder.zip")


def test_bundle_layout(bundle):
    archive = zipfile.ZipFile(bundle)
    names = archive.namelist()
    for entry in ("setup.sh", "run_autograder"):
        assert entry in names
        assert stat.S_IMODE(archive.getinfo(entry).external_attr >> 16) & 0o100, f"{entry} must be executable"
    for needed in ("kit/autograder/grade.py", "kit/autograder/manifest.toml", "kit/conftest.py", "kit/setup.sh",
                   "kit/reference/adapters.py", "kit/harness/submission.py", "kit/pyproject.toml"):
        assert needed in names, needed
    assert any(name.startswith("kit/autograder/hidden_tests/test_") for name in names)
    assert archive.read("kit/reference/adapters.py") == (KIT / "adapters.py").read_bytes(), "links become files"
    for name in names:
        parts = name.split("/")
        assert not {".git", ".venv", "__pycache__", "leaderboard", "results", "dist"} & set(parts), name


def _fake_autograder_root(tmp_path: Path, bundle: Path) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    zipfile.ZipFile(bundle).extractall(root / "source")
    (root / "source" / "kit" / ".venv").symlink_to(KIT / ".venv")
    shutil.copytree(KIT / "reference", root / "submission", symlinks=False)
    for path in [tmp_path, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _run_autograder(root: Path, flags: str) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AUTOGRADER_ROOT": str(root),
           "CS336_GRADE_FLAGS": flags}
    result = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_run_autograder_grades_the_uploaded_submission(tmp_path, bundle):
    root = _fake_autograder_root(tmp_path, bundle)
    kit = root / "source" / "kit"
    locked = subprocess.run(["bash", str(kit / "autograder" / "gradescope" / "lock_down.sh"), str(kit)],
                            capture_output=True, text=True, timeout=300)  # as setup.sh leaves the image
    assert locked.returncode == 0, locked.stderr
    results = _run_autograder(root, f"--tests {QUICK_TEST} -q")
    assert problems_with(results) == []
    assert [entry["status"] for entry in results["tests"]] == ["passed"], results["output"]


def test_run_autograder_writes_results_even_when_the_grader_fails(tmp_path, bundle):
    root = _fake_autograder_root(tmp_path, bundle)
    results = _run_autograder(root, "--no-such-flag")
    assert problems_with(results) == []
    assert results["score"] == 0 and "grader failed" in results["output"]
