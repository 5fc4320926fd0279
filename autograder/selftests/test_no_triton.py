"""Students without Linux: where ``import triton`` fails, everything else installs and runs.

Triton publishes wheels for Linux only, so on macOS or Windows the student setup must install
everything but Triton, the tests that run Triton kernels must be skipped with one note that says
where to run them (the kit's Linux container, or Gradescope's CPU runner), and the release must
ship that container. There is no Mac here: a ``sitecustomize`` on ``PYTHONPATH`` makes every
``import triton`` raise ModuleNotFoundError, as it does where Triton is not installed, and a fake
``uname`` says which OS ``setup.sh`` runs on.

Costs about 30 s: two pytest runs of a few small FlashAttention tests and two runs of the
release's ``setup.sh`` against a stand-in interpreter that installs nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from harness.triton_marker import HOW_TO_RUN, SKIP_REASON

KIT = Path(__file__).resolve().parents[2]
PYTHON = KIT / ".venv" / "bin" / "python"
BLOCK_TRITON = '''\
import sys


class _NoTriton:
    """Where Triton is not installed: every import of triton or a submodule fails."""

    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTriton())
'''
# A few visible FlashAttention tests: two PyTorch cases, and Triton forward and backward cases.
SELECTION = ("tests/test_flash_forward_triton.py::test_flash_forward_triton_cs336_shape",
             "tests/test_flash_forward_triton.py::test_flash_forward_triton_rejects_bad_input",
             "tests/test_flash_backward.py::test_flash_backward_cs336_shape")


@pytest.fixture(scope="module")
def no_triton(tmp_path_factory) -> dict:
    """The environment of a process in which ``import triton`` fails."""
    shim = tmp_path_factory.mktemp("no-triton")
    (shim / "sitecustomize.py").write_text(BLOCK_TRITON)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CS336_", "PYTEST_"))}
    env["PYTHONPATH"] = str(shim)
    probe = subprocess.run([sys.executable, "-c", "import triton"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'triton'" in probe.stderr, "the shim must hide triton"
    return env


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=KIT, env=env, capture_output=True, text=True, timeout=600)


def test_triton_tests_are_skipped_with_one_note_and_the_rest_run(no_triton):
    run = _run(no_triton, "-m", "pytest", "-p", "no:cacheprovider", "--submission", str(KIT / "reference"),
               *SELECTION)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"without Triton the other tests must still run and pass:\n{output[-3000:]}"
    assert re.search(r"\b2 passed\b", output), f"the two PyTorch cases must run and pass:\n{output[-3000:]}"
    assert len(re.findall(r"=+ Triton tests skipped =+", output)) == 1, f"exactly one note:\n{output[-3000:]}"
    note = HOW_TO_RUN.format(count=14)  # 2 cs336-shape forward cases, 10 bad inputs, 2 backward cases
    assert note in output, f"the note must count the skipped tests and say where to run them:\n{output[-3000:]}"
    skip_lines = [line for line in output.splitlines() if line.startswith("SKIPPED") and SKIP_REASON in line]
    assert len(skip_lines) == 1 and skip_lines[0].startswith("SKIPPED [14] "), (
        f"pytest's skip summary must fold them into one line:\n{output[-3000:]}")


def test_the_note_names_both_ways_to_run_them():
    assert ".devcontainer" in HOW_TO_RUN and "docker build" in HOW_TO_RUN and "Gradescope" in HOW_TO_RUN
    assert (KIT / ".devcontainer" / "Dockerfile").is_file() and (KIT / ".devcontainer" / "devcontainer.json").is_file()


def test_local_score_counts_them_as_not_graded_here(no_triton):
    env = {**no_triton, "CS336_SUBMISSION": str(KIT / "reference")}
    run = _run(env, "-m", "tests.score", "-p", "no:cacheprovider",
               "tests/test_flash_forward_triton.py::test_flash_forward_triton_cs336_shape")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "< lost points" not in output, f"a Triton test skipped for want of Triton loses no points:\n{output}"
    assert "are for Triton tests, not run here" in output, output[-2000:]


def test_pyproject_asks_for_triton_on_linux_only():
    requirements = [Requirement(line) for line in tomllib.loads((KIT / "pyproject.toml").read_text())
                    ["project"]["dependencies"]]
    triton = [req for req in requirements if req.name == "triton"]
    assert len(triton) == 1 and triton[0].marker is not None, "triton must carry a platform marker"
    for system, wanted in (("Linux", True), ("Darwin", False), ("Windows", False)):
        assert triton[0].marker.evaluate({"platform_system": system}) is wanted, (system, str(triton[0].marker))
    assert all(req.marker is None for req in requirements if req.name != "triton"), (
        "everything but triton installs everywhere")


# A stand-in for the release's .venv/bin/python: the kit's interpreter without Triton, which
# records an attempt to run pip (and installs nothing).
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$*" >> "$PIP_LOG"; exit 0; fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.mark.parametrize("system,installs", [("Darwin", False), ("Linux", True)])
def test_student_setup_installs_everything_but_triton_off_linux(student_release, no_triton, tmp_path, system,
                                                                installs):
    """The release's setup.sh, on a machine whose venv has everything but Triton: off Linux that is
    complete (nothing to install); on Linux, Triton is missing, so it installs."""
    release = tmp_path / "student"
    subprocess.run(["cp", "-r", str(student_release), str(release)], check=True)
    (release / ".venv" / "bin").mkdir(parents=True)
    (release / ".venv" / "bin" / "python").write_text(FAKE_PYTHON)
    (release / ".venv" / "bin" / "python").chmod(0o755)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "uname").write_text(f"#!/bin/sh\necho {system}\n")
    (fake_bin / "uname").chmod(0o755)
    log = tmp_path / "pip.log"
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": no_triton["PYTHONPATH"],
           "REAL_PYTHON": str(PYTHON), "PIP_LOG": str(log)}
    run = subprocess.run(["bash", "setup.sh"], cwd=release, env=env, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    attempted = log.read_text() if log.exists() else ""
    if installs:
        assert "install" in attempted and "-e ." in attempted, f"on Linux Triton is required:\n{output}"
    else:
        assert not attempted, f"off Linux, a venv with everything but Triton is complete; setup ran pip:\n{attempted}"
        assert "no Triton" in output, output


def test_release_ships_the_linux_container(student_release):
    container = student_release / ".devcontainer"
    dockerfile = (container / "Dockerfile").read_text()
    config = json.loads((container / "devcontainer.json").read_text())
    assert (container / config["build"]["dockerfile"]).is_file()
    assert (container / config["build"]["context"]).resolve() == student_release.resolve(), (
        "the build context is the assignment folder, which holds what the Dockerfile copies")
    # What the Dockerfile copies exists in the release and is not left out by .dockerignore.
    ignore = (student_release / ".dockerignore").read_text().splitlines()
    kept = {line[1:] for line in ignore if line.startswith("!")}
    assert "*" in ignore, ".dockerignore must keep a student's .venv (built for another OS) out of the build"
    copied = [part for line in dockerfile.splitlines() if line.startswith("COPY ") for part in line.split()[1:-1]]
    assert copied, "the Dockerfile copies the dependency list"
    for name in copied:
        assert (student_release / name).is_file() and name in kept, f"the Dockerfile copies {name}: ship and keep it"
    assert "pyproject.toml" in copied and "constraints-cpu.txt" in copied
    assert re.search(r"pip install -c \S*constraints-cpu\.txt", dockerfile), "the container installs the pinned CPU stack"
    assert "download.pytorch.org/whl/cpu" in dockerfile, "PyTorch's CPU build, not its CUDA one"
    assert re.search(r'(?m)^CMD \[.*"pytest"\]', dockerfile), "by default the container runs the visible tests"
    # The commands the student is told to run build this Dockerfile.
    build = "docker build -t cs336-systems -f .devcontainer/Dockerfile ."
    assert build in (student_release / "README.md").read_text() and build in HOW_TO_RUN and build in dockerfile
