"""The Gradescope runner, emulated end to end: what course staff get when they upload the bundle.

One module-scoped image: the bundle unpacked into an ``/autograder`` layout under a temporary
root, then the bundle's own ``setup.sh`` run as root (it grades the bundled reference as a smoke
test with ``--expect-full`` and locks the staff files down). Then ``run_autograder`` grades three
uploads, as Gradescope would, each into ``results/results.json``:

- the reference: every test it can run here passes;
- the stubs students start from (the kit's own ``adapters.py`` and ``cs336_systems/``): it scores
  less, and nothing crashes;

  both on ``UPLOAD_PROBLEMS`` only (through ``CS336_GRADE_FLAGS``, which Gradescope never sets): a
  problem with hidden tests in each part, and the Triton kernel, whose tests run through the
  replay. What this file checks is the runner around the grade; the whole reference's grade is
  checked by test_grader_submissions.py, and the kit's setup.sh grades it again;
- a submission that hangs (its ``adapters.py`` never finishes importing), under the runner's limit
  scaled down from 600 s to ``HANG_LIMIT_S`` (the manifest's ``runner_timeout_s``/``runner_margin_s``,
  the one setting run_autograder and the README share): results.json is still written in time.

Each results.json must be one Gradescope accepts (gradescope_schema.py), and nothing a student
sees before grades are published (the top-level output, every test shown at once) names a hidden
test. After all of it, no file under the root that ``nobody`` can read names a hidden test or holds
the course's secret.

What differs from Gradescope, and why: the image's ``.venv`` is a link to this kit's environment,
so ``setup.sh`` finds the stack installed and installs nothing (the real image installs it);
``CS336_SKIP_SLURM=1`` keeps ``setup.sh`` from installing Slurm with apt-get (only the kit's own
real-Slurm selftest needs it; the bundle never sets this); ``CS336_SETUP_GRADE_FLAGS`` keeps the
smoke grade to two light problems (the kit's own setup.sh grades the whole reference). Cost: four grades on a CPU (the smoke
grade, the reference, the stubs, the hang): measured 2026-12-02 on a 2-core machine, 291 s at a
load average of about 4 and 577 s at about 9; 147 s at about 2 (the smoke grade 51 s) once part 2's
ranks stopped walking every inherited object (executor/probes/parallel_launch.py) and the
hang's scaled-down limit went from 60 s to 40 s. Needs root and ``runuser`` (the executors' uids, and
the check as ``nobody``); skipped otherwise. It found that ``/autograder/results`` was readable by
every uid while the grade wrote hidden test names there; run_autograder now keeps it root only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from autograder.bundle import build_bundle
from autograder.selftests.gradescope_schema import hidden_shown_early, problems_with
from autograder.selftests.test_gradescope_runner import _hidden_names, _readable_leaks

KIT = Path(__file__).resolve().parents[2]
SECRET = "emulated-course-secret-2026"
# The runner's 600 s and 60 s margin, scaled down for the hang: run_autograder gives the grade
# HANG_LIMIT_S - 2 * HANG_MARGIN_S (24 s, which the hang waits out with the CPU idle) and kills it
# at HANG_LIMIT_S - HANG_MARGIN_S.
HANG_LIMIT_S, HANG_MARGIN_S = 40, 8
# The smoke grade of the bundle's setup.sh, on two light problems here: the whole reference is graded
# by the kit's own setup.sh and by run_autograder below (through CS336_SETUP_GRADE_FLAGS, which Gradescope never sets).
SMOKE_PROBLEMS = "pytorch_attention,nsys_profile"
# What run_autograder grades of the reference's and the stubs' uploads: hidden tests in part 1 and
# part 2, and Triton credit (its replay). On the whole assignment the three uploads took 86 s, on
# these 47 s (this file alone on a quiet 2-core machine, 2026-12-06).
UPLOAD_PROBLEMS = "pytorch_attention,flash_forward_triton,naive_ddp"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                                reason="emulating Gradescope's runner needs root (executor uids) and runuser")


def _set_limits(kit: Path, limit: int, margin: int) -> None:
    manifest = kit / "autograder" / "manifest.toml"
    text = re.sub(r"(?m)^runner_timeout_s = \d+", f"runner_timeout_s = {limit}", manifest.read_text())
    manifest.write_text(re.sub(r"(?m)^runner_margin_s = \d+", f"runner_margin_s = {margin}", text))


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """(root, setup's output): the /autograder tree after the bundle's setup.sh ran."""
    top = Path(tempfile.mkdtemp(prefix="cs336-gradescope-"))
    top.chmod(0o755)  # the executors' uids must reach the submission's copy under it
    root = top / "autograder"
    (root / "source").mkdir(parents=True)
    bundle = build_bundle(tmp_path_factory.mktemp("bundle") / "autograder.zip", secret=SECRET)
    zipfile.ZipFile(bundle).extractall(root / "source")
    kit = root / "source" / "kit"
    (kit / ".venv").symlink_to(KIT / ".venv")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(top), "AUTOGRADER_ROOT": str(root),
           "CS336_SKIP_SLURM": "1", "CS336_SETUP_GRADE_FLAGS": f"--problems {SMOKE_PROBLEMS}"}
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True,
                           timeout=1800)
    assert setup.returncode == 0, f"setup.sh failed:\n{setup.stdout[-3000:]}\n{setup.stderr[-3000:]}"
    yield root, setup.stdout + setup.stderr
    shutil.rmtree(top, ignore_errors=True)


def _upload(root: Path, files: dict[str, Path]) -> None:
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    submission.mkdir()
    for name, source in files.items():
        if source.is_dir():
            shutil.copytree(source, submission / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, submission / name)
    shutil.rmtree(root / "results", ignore_errors=True)


def _run_autograder(root: Path, flags: str = "") -> tuple[dict, float]:
    """(results.json, seconds) of run_autograder on the uploaded submission; ``flags`` go to its grade."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AUTOGRADER_ROOT": str(root)}
    if flags:
        env["CS336_GRADE_FLAGS"] = flags
    started = time.monotonic()
    result = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text()), time.monotonic() - started


def _shown_before_publication(results: dict) -> str:
    """Everything of ``results`` a student sees before grades are published."""
    shown = [results["output"]]
    for test in results["tests"]:
        if test["visibility"] == "visible":
            shown += [test["name"], test["output"]]
    return "\n".join(shown)


def _check_student_view(results: dict) -> None:
    assert problems_with(results) == [], problems_with(results)
    assert hidden_shown_early(results) == []
    shown = _shown_before_publication(results)
    leaked = [name for name in _hidden_names() if re.search(rf"\b{name}\b", shown)]
    assert not leaked, f"a student sees hidden test names before publication: {leaked[:5]}"


def test_setup_grades_the_reference_and_locks_the_staff_files(image):
    root, log = image
    kit = root / "source" / "kit"
    assert json.loads((kit / "results" / "reference" / "results.json").read_text())["tests"], "the smoke grade ran"
    assert "staff files locked to root" in log, log[-2000:]
    assert (kit / "autograder" / "hidden_seed").stat().st_mode & 0o077 == 0


def test_reference_stubs_and_a_hang_each_get_a_valid_results_json(image, tmp_path):
    root, _ = image
    kit = root / "source" / "kit"

    _upload(root, {"adapters.py": KIT / "reference" / "adapters.py", "cs336_systems": KIT / "reference" / "cs336_systems"})
    reference, _ = _run_autograder(root, f"--problems {UPLOAD_PROBLEMS}")
    _check_student_view(reference)
    failed = [test["name"] for test in reference["tests"] if test["status"] != "passed"]
    assert reference["tests"] and not failed, f"the reference failed {failed[:5]}:\n{reference['output'][-2000:]}"
    assert reference["score"] > 0

    _upload(root, {"adapters.py": KIT / "adapters.py", "cs336_systems": KIT / "cs336_systems"})
    stubs, _ = _run_autograder(root, f"--problems {UPLOAD_PROBLEMS}")
    _check_student_view(stubs)
    assert stubs["tests"] and stubs["score"] < reference["score"], (stubs["score"], reference["score"])

    hanging = tmp_path / "adapters.py"
    hanging.write_text((KIT / "reference" / "adapters.py").read_text() + "\nimport time\nwhile True:\n    time.sleep(1)\n")
    _upload(root, {"adapters.py": hanging, "cs336_systems": KIT / "reference" / "cs336_systems"})
    _set_limits(kit, HANG_LIMIT_S, HANG_MARGIN_S)
    try:
        hung, seconds = _run_autograder(root)
    finally:
        _set_limits(kit, 600, 60)
    _check_student_view(hung)
    assert seconds < HANG_LIMIT_S - HANG_MARGIN_S / 2, (
        f"results.json must be written before the runner's {HANG_LIMIT_S} s limit, with a margin; took {seconds:.0f} s")
    assert hung["score"] == 0, hung["output"]

    top = root.parent  # world-traversable, unlike tmp_path
    names_file = top / "names.txt"
    names_file.write_text("\n".join(_hidden_names() + [SECRET]) + "\n")
    names_file.chmod(0o644)
    readable = _readable_leaks(top, names_file)
    assert str(names_file) in readable, "the check must find the names where nobody can read them (its own list)"
    assert [path for path in readable if path != str(names_file)] == [], (
        "readable by an unprivileged uid in the image after grading")
