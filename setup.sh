#!/usr/bin/env bash
# Set up the kit in .venv and run its main job: grade the bundled reference submission.
#
#   bash setup.sh            # first run: creates .venv (about 2 minutes on a CPU machine)
#   bash setup.sh            # later runs reuse .venv and only re-grade
#
# On a machine without an NVIDIA GPU the CPU stack in constraints-cpu.txt is pinned; with one,
# the tested GPU stack in constraints-gpu.txt. CS336_CONSTRAINTS=FILE picks another (none: no pins).
# Triton has builds for Linux only: elsewhere (macOS, Windows) everything else is installed, and
# the tests that need Triton are skipped with a note that says where to run them.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
        echo "[setup] cannot use PYTHON=$PYTHON: it does not run, is older than 3.11 or lacks venv" \
             "(install python3 >= 3.11 with venv, or set PYTHON to one)" >&2
        exit 1
    fi
    echo "[setup] creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
fi
modules="torch, einops, jaxtyping, hypothesis, pytest, matplotlib"
if [ "$(uname -s)" = Linux ]; then
    modules="$modules, triton"  # pyproject.toml asks for triton on Linux only, where it has builds
fi
if ! .venv/bin/python -c "import $modules" 2>/dev/null; then
    if [ -n "${CS336_CONSTRAINTS:-}" ]; then
        pins=$CS336_CONSTRAINTS
    elif command -v nvidia-smi >/dev/null 2>&1; then
        pins=constraints-gpu.txt
    else
        pins=constraints-cpu.txt
    fi
    constraints=()
    if [ "$pins" != none ]; then
        if [ ! -r "$pins" ]; then
            echo "[setup] CS336_CONSTRAINTS=$pins: no such file (give a pip constraints file, or none)" >&2
            exit 1
        fi
        constraints=(-c "$pins")
    fi
    echo "[setup] installing with pins from ${pins}"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e . "${constraints[@]}"
fi
echo "[setup] installed: $(.venv/bin/python -c '
import torch
try:
    import triton
    print(f"torch {torch.__version__}, triton {triton.__version__}")
except ImportError:
    print(f"torch {torch.__version__}; no Triton (it has builds for Linux only; the tests say where to run its tests)")
')"

# --- kit only below: the student release (autograder/release.py) ends setup.sh here ---
# Debian's Slurm, for the batch's real-cluster selftest: installed as root where apt-get exists, else skipped.
if [ -f autograder/selftests/install_slurm.sh ]; then  # a kit checkout; a Gradescope bundle has no selftests
    bash autograder/selftests/install_slurm.sh || echo "[setup] slurm: continuing without it"
fi
echo "[setup] grading the bundled reference submission (results/reference/results.json)"
isolation=()
if [ "$(id -u)" != 0 ]; then
    isolation=(--same-user)  # the bundled reference is our own code; student code is graded as root
fi
exec .venv/bin/python -m autograder grade reference --out results/reference "${isolation[@]}" ${CS336_SETUP_GRADE_FLAGS:-}
