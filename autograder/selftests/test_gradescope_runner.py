"""What course staff deploying on Gradescope rely on, checked without Gradescope.

- ``run_autograder`` writes a valid results.json before anything else, and again before the
  runner's limit (``runner_timeout_s`` less ``runner_margin_s`` in the manifest) when the grade
  hangs; it exports the bundle's per-course hidden seed. A fake ``.venv/bin/python`` stands in
  for the grader here, so the limits can be scaled down to seconds.
- ``bundle`` embeds a hidden seed staff choose, or a fresh one.
- ``lock_down.sh`` leaves nothing an unprivileged uid can read that names a hidden test or
  holds the seed (checked as ``nobody``: the same files are readable before it runs).
- The "Slowest tests" line, which students see at once, names no hidden test.
- ``setup.sh`` pins the tested GPU stack on a GPU machine (another with CS336_CONSTRAINTS),
  and it and the Gradescope setup.sh refuse a Python they cannot run.
- ``leaderboard table`` with its default paths leaves no untracked file in the kit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from autograder.bundle import SEED_FILE, BundleError, build_bundle
from autograder.manifest import load_manifest
from autograder.results import slowest_line
from autograder.watchdog import SuiteRun, Verdict
from autograder.selftests.gradescope_schema import problems_with

KIT = Path(__file__).resolve().parents[2]
FAKE_GRADER = """#!/usr/bin/env bash
# stands in for the kit's python: records how run_autograder called it, then acts as $FAKE_MODE says
printf '%s\\n' "$@" > "$FAKE_LOG.argv"
printf '%s' "${CS336_HIDDEN_SEED:-}" > "$FAKE_LOG.seed"
case "$FAKE_MODE" in
  hang) sleep 3600 ;;
  write) out=""; prev=""; for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
         echo '{"score": 1.5, "execution_time": 1, "output": "graded", "tests": []}' > "$out/results.json" ;;
  crash) exit 3 ;;
esac
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_bundle(tmp_path_factory.mktemp("bundle") / "autograder.zip", secret="course-secret-2026")


def _root(tmp_path: Path, bundle: Path, runner: int = 12, margin: int = 4) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    zipfile.ZipFile(bundle).extractall(root / "source")
    kit = root / "source" / "kit"
    manifest = kit / "autograder" / "manifest.toml"
    text = re.sub(r"(?m)^runner_timeout_s = \d+", f"runner_timeout_s = {runner}", manifest.read_text())
    manifest.write_text(re.sub(r"(?m)^runner_margin_s = \d+", f"runner_margin_s = {margin}", text))
    (kit / ".venv" / "bin").mkdir(parents=True)
    (kit / ".venv" / "bin" / "python").write_text(FAKE_GRADER)
    (kit / ".venv" / "bin" / "python").chmod(0o755)
    (root / "submission").mkdir()
    return root


def _run(root: Path, mode: str, timeout: float = 60) -> tuple[dict, float, Path]:
    log = root / "fake"
    env = {"PATH": "/usr/bin:/bin", "AUTOGRADER_ROOT": str(root), "FAKE_MODE": mode, "FAKE_LOG": str(log)}
    started = time.monotonic()
    result = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text()), time.monotonic() - started, log


def test_a_hanging_grade_still_gets_results_before_the_runner_limit(tmp_path, bundle):
    root = _root(tmp_path, bundle, runner=12, margin=4)
    results, seconds, log = _run(root, "hang")
    assert seconds < 12 - 2, f"results.json must be written {4} s before the runner's 12 s limit; took {seconds:.1f} s"
    assert problems_with(results) == [] and results["score"] == 0
    assert "runner's limit" in results["output"] and "12 s" in results["output"], results["output"]
    argv = (log.parent / "fake.argv").read_text().split("\n")
    assert argv[argv.index("--timeout") + 1] == str(12 - 2 * 4), argv  # the grade's own deadline comes first


def test_results_are_the_grades_own_and_the_seed_is_the_bundles(tmp_path, bundle):
    root = _root(tmp_path, bundle)
    results, _, log = _run(root, "write")
    assert results["score"] == 1.5 and "fallback" not in json.dumps(results)
    assert (log.parent / "fake.seed").read_text() == "course-secret-2026"
    crashed, _, _ = _run(root, "crash")
    assert problems_with(crashed) == [] and "exit status 3" in crashed["output"]


def test_a_missing_kit_still_leaves_a_valid_results_json(tmp_path, bundle):
    root = _root(tmp_path, bundle)
    shutil.rmtree(root / "source" / "kit")
    results, _, _ = _run(root, "write")
    assert problems_with(results) == [] and results["score"] == 0 and "not installed" in results["output"]


def test_the_bundle_embeds_the_chosen_or_a_fresh_secret(tmp_path, bundle):
    archive = zipfile.ZipFile(bundle)
    assert archive.read(SEED_FILE).decode().strip() == "course-secret-2026"
    assert (archive.getinfo(SEED_FILE).external_attr >> 16) & 0o777 == 0o600
    first = zipfile.ZipFile(build_bundle(tmp_path / "a.zip")).read(SEED_FILE).decode().strip()
    second = zipfile.ZipFile(build_bundle(tmp_path / "b.zip")).read(SEED_FILE).decode().strip()
    assert first != second and len(first) >= 24
    with pytest.raises(BundleError, match="at least 6"):
        build_bundle(tmp_path / "c.zip", secret="abc")
    names = archive.namelist()
    assert not [n for n in names if n.startswith(("kit/gpu_checks/", "kit/records/", "kit/benchmarks/",
                                                 "kit/autograder/selftests/"))]


def _hidden_names() -> list[str]:
    """Names of hidden tests and their files that no visible file mentions (so a hit is a leak)."""
    visible = "\n".join(path.read_text() for path in (KIT / "tests").rglob("*.py"))
    names = set()
    for path in (KIT / "autograder" / "hidden_tests").glob("test_*.py"):
        names.add(path.stem)
        names.update(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    return sorted(name for name in names if name not in visible)


def _readable_leaks(root: Path, names_file: Path) -> list[str]:
    answer = subprocess.run(["runuser", "-u", "nobody", "--", "grep", "-rlsF", "-f", str(names_file), str(root)],
                            capture_output=True, text=True, timeout=300)
    return [line for line in answer.stdout.splitlines() if line]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_lock_down_leaves_nothing_an_unprivileged_uid_reads_that_names_a_hidden_test(bundle):
    top = Path(tempfile.mkdtemp(prefix="cs336-lockdown-"))
    try:
        top.chmod(0o755)
        root = top / "autograder"
        (root / "source").mkdir(parents=True)
        zipfile.ZipFile(bundle).extractall(root / "source")
        kit = root / "source" / "kit"
        (kit / ".venv").mkdir()
        names = _hidden_names()
        assert len(names) > 20, names
        smoke = kit / "results" / "reference"  # what setup.sh's smoke grade leaves: every hidden test's name
        smoke.mkdir(parents=True)
        (smoke / "results.json").write_text(json.dumps({"tests": [{"name": name} for name in names]}))
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        names_file = top / "names.txt"
        names_file.write_text("\n".join(names + ["course-secret-2026"]) + "\n")
        before = _readable_leaks(root, names_file)
        assert any("results.json" in path for path in before), "the check must see a leak before the lock-down"
        subprocess.run(["bash", str(kit / "autograder" / "gradescope" / "lock_down.sh"), str(kit)], check=True,
                       capture_output=True)
        assert _readable_leaks(root, names_file) == [], "readable by an unprivileged uid after lock_down.sh"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_slowest_tests_line_names_no_hidden_test():
    manifest = load_manifest()
    hidden = "autograder/hidden_tests/test_ddp_bucketed_hidden.py::test_ddp_bucketed_matches_single_process[3-x]"
    runs = [SuiteRun("hidden#0", {hidden: Verdict(hidden, "passed", duration=9.0)}),
            SuiteRun("visible#0", {"tests/test_fsdp.py::test_fsdp_shards": Verdict("tests/test_fsdp.py::test_fsdp_shards",
                                                                                  "passed", duration=4.0)})]
    line = slowest_line(runs, manifest)
    assert "a hidden test of ddp_bucketed 9.0 s" in line and "test_fsdp.py::test_fsdp_shards 4.0 s" in line, line
    assert "hidden.py" not in line and "matches_single_process" not in line, line


def _setup_copy(tmp_path: Path, gpu: bool) -> tuple[Path, dict]:
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in ("setup.sh", "constraints-cpu.txt", "constraints-gpu.txt"):
        shutil.copy(KIT / name, kit / name)
    (kit / ".venv" / "bin").mkdir(parents=True)
    fake = kit / ".venv" / "bin" / "python"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s " "$@" >> "$(dirname "$0")/calls"; echo >> "$(dirname "$0")/calls"\n'
                    'case "$2" in *"import torch, einops"*) exit 1 ;; esac\n')
    fake.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    return kit, {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}


@pytest.mark.parametrize("gpu, pins, expected", [(True, None, "-c constraints-gpu.txt"),
                                                 (False, None, "-c constraints-cpu.txt"),
                                                 (True, "constraints-cpu.txt", "-c constraints-cpu.txt"),
                                                 (True, "none", None)])
def test_setup_pins_the_tested_stack(tmp_path, gpu, pins, expected):
    kit, env = _setup_copy(tmp_path, gpu)
    if pins:
        env["CS336_CONSTRAINTS"] = pins
    result = subprocess.run(["bash", "setup.sh"], cwd=kit, env=env, capture_output=True, text=True, timeout=60)
    installs = [line for line in (kit / ".venv" / "bin" / "calls").read_text().splitlines() if "pip install" in line]
    assert len(installs) == 1, (result.stdout, result.stderr)
    if expected:
        assert expected in installs[0], installs
    else:
        assert " -c " not in installs[0], installs
    assert "torch==2.11.*" in (KIT / "constraints-gpu.txt").read_text()
    assert "triton==3.6.*" in (KIT / "constraints-gpu.txt").read_text()


def test_setup_refuses_a_python_it_cannot_run(tmp_path):
    kit, env = _setup_copy(tmp_path, gpu=False)
    shutil.rmtree(kit / ".venv")
    result = subprocess.run(["bash", "setup.sh"], cwd=kit, env={**env, "PYTHON": "/bin/false"}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and "cannot use PYTHON=/bin/false" in result.stderr, result.stderr


def test_the_gradescope_setup_skips_a_python_it_cannot_run(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.13").write_text("#!/bin/sh\nexit 1\n")  # on PATH, but broken
    (bin_dir / "python3.13").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CS336_SETUP_PICK_PYTHON_ONLY": "1", "AUTOGRADER_ROOT": str(tmp_path)}
    result = subprocess.run(["bash", str(KIT / "autograder" / "gradescope" / "setup.sh")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "skipping" in result.stderr and str(bin_dir / "python3.13") in result.stderr
    chosen = re.search(r"Python: (\S+)", result.stdout).group(1)
    assert chosen != str(bin_dir / "python3.13"), result.stdout


def test_leaderboard_table_with_default_paths_leaves_no_untracked_file():
    if subprocess.run(["git", "-C", str(KIT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    result = subprocess.run([sys.executable, "-m", "leaderboard", "table"], cwd=KIT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    status = subprocess.run(["git", "-C", str(KIT), "status", "--porcelain", "--untracked-files=all", "--",
                             "leaderboard", "records"], capture_output=True, text=True).stdout
    assert not [line for line in status.splitlines() if line.startswith("??")], status
