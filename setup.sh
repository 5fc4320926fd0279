#!/usr/bin/env bash
# Set up the kit in .venv and run its main job: grade the bundled reference submission.
#
#   bash setup.sh            # first run: creates .venv (about 2 minutes on a CPU machine)
#   bash setup.sh            # later runs reuse .venv and only re-grade
#
# On a machine without an NVIDIA GPU the CPU stack in constraints-cpu.txt is pinned.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, triton, einops, jaxtyping, hypothesis, pytest, matplotlib" 2>/dev/null; then
    constraints=()
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        constraints=(-c constraints-cpu.txt)
        echo "[setup] no NVIDIA GPU found: installing the CPU stack pinned in constraints-cpu.txt"
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e . "${constraints[@]}"
fi
echo "[setup] installed: $(.venv/bin/python -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}")')"

# --- kit only below: the student release (autograder/release.py) ends setup.sh here ---
# Debian's Slurm, for the batch's real-cluster selftest: installed as root where apt-get exists, else skipped.
bash autograder/batch/install_slurm.sh || echo "[setup] slurm: continuing without it"
echo "[setup] grading the bundled reference submission (results/reference/results.json)"
isolation=()
if [ "$(id -u)" != 0 ]; then
    isolation=(--unisolated)  # the bundled reference is our own code; student code is graded as root
fi
exec .venv/bin/python -m autograder grade reference --out results/reference "${isolation[@]}" ${CS336_SETUP_GRADE_FLAGS:-}
