"""Every entry point, started by a Python that cannot import the kit's stack, refuses in one line.

A fresh shell's ``python`` is often the machine's, without torch: the staff docs wrote ``python
-m autograder ...`` and the grade died with an AttributeError, ``leaderboard run`` with a
ModuleNotFoundError, and a batch retried every grade. Each entry point now exits at once with
status 2 and one line on stderr naming the kit's interpreter (harness/interpreter.py); a
batch whose jobs would start such a Python stops before it queues one. The Python without
torch is a venv made here without packages (so the test means the same on a machine whose own
Python has torch).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch.driver import Cluster, Task, Wording, drive
from autograder.batch.executors import Job
from harness.interpreter import kit_python

KIT = Path(__file__).resolve().parents[2]
# Every ``python -m`` entry point of the kit, with arguments a user might give it.
ENTRY_POINTS = [
    ("autograder", "grade", "reference", "--problems", "flash_forward_pytorch"),
    ("autograder", "batch", "export.zip", "--out", "grades", "--gpus", "0", "--partial"),
    ("leaderboard", "run", "reference", "--name", "x", "--cpu"),
    ("leaderboard.training_step", "run", "reference", "--cpu"),
    ("fixtures", "mutants"),
    ("tests.score",),
    ("tests.checks.flash_repro", "pytorch", "forward", "FlashCase()"),
    ("autograder.selftests.local_slurm", "down", "/tmp/nowhere"),
    ("autograder.student_points", "--help"),
    ("autograder.answer_keys.parallelism_2026", "key"),
    *[(f"autograder.tools.{path.stem}", "--help") for path in sorted((KIT / "autograder" / "tools").glob("*.py"))
      if "__main__" in path.read_text()],
]

# Started by the grader with its own interpreter (harness_pytest, the zygote), or run as a script
# inside another checkout, whose own ``tests`` package shadows the kit's (peer_checks/bitwise_floor).
NOT_ENTRY_POINTS = ("harness_pytest.py", "zygote.py", "bitwise_floor.py")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = str(folder / "bin" / "python")
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("a venv without packages still imports torch here")
    return python


def test_every_module_with_a_main_is_listed():
    """A new entry point must join ENTRY_POINTS (and call require_kit_stack)."""
    listed = {entry[0] for entry in ENTRY_POINTS}
    for path in [*KIT.glob("*/__main__.py"), *KIT.glob("*/*/__main__.py"), *KIT.glob("autograder/**/*.py"),
                 *KIT.glob("tests/**/*.py"), *KIT.glob("fixtures/*.py")]:
        text = path.read_text()
        if not re.search(r'^if __name__ == "__main__"', text, re.MULTILINE) or path.name in NOT_ENTRY_POINTS:
            continue
        module = ".".join(path.relative_to(KIT).with_suffix("").parts).removesuffix(".__main__")
        assert module in listed, f"{module} has a __main__ but is not in ENTRY_POINTS"
        assert "require_kit_stack(" in text, f"{path} does not check its interpreter"


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda entry: entry[0])
def test_an_entry_point_under_a_python_without_torch_says_which_python_in_one_line(bare_python, entry):
    module, *args = entry
    result = subprocess.run([bare_python, "-m", module, *args], cwd=KIT, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in result.stderr and not result.stdout, result.stderr[-2000:]
    assert "cannot import torch" in lines[0] and f"{kit_python(str(KIT))} -m {module}" in lines[0], lines[0]


def test_a_batch_whose_jobs_would_start_that_python_queues_nothing(bare_python, tmp_path, capsys):
    job = Job("s1", "s1", (bare_python, "-m", "autograder", "grade", "x"), str(KIT), str(tmp_path / "s1" / "log"), 60)
    wording = Wording(command="batch", title="Batch", verb="grade", done="graded", noun="grades", version="kit")
    with pytest.raises(SystemExit) as stopped:
        drive([Task(job, {"v": 1})], Cluster.choose("local", gpus="0", jobs=1), tmp_path, lambda *_: None, wording,
              version="v")
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1 and bare_python in err[0] and "cannot import torch" in err[0]
    assert not (tmp_path / "s1").exists(), "nothing ran"


# Every document that tells staff or students what to type (records/ holds dated records of runs,
# each written once with the commands of its day: only its index is kept current).
DOCS = ("README.md", "leaderboard/README.md", "autograder/README.md", "autograder/student_readme.md",
        "handout/README.md", "autograder/*.md", "autograder/tools/*.md", "autograder/peer_checks/*.md",
        "benchmarks/*.md", "confine/*.md", "records/README.md")


def test_every_documented_command_names_the_kits_interpreter():
    """A command written ``python -m ...`` runs the shell's Python, which may lack the kit's stack."""
    bare = re.compile(r"(?<![/\w.\-])python3? (-m |(autograder|benchmarks|leaderboard|gpu_checks|fixtures|tests)/)")
    found = [f"{path.relative_to(KIT)}:{number}: {line.strip()}" for pattern in DOCS for path in KIT.glob(pattern)
             for number, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line)]
    assert not found, "write .venv/bin/python:\n" + "\n".join(found)
