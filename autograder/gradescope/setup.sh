#!/usr/bin/env bash
# Gradescope image setup (runs once, as root, when the autograder zip is uploaded).
#
# Installs a Python >= 3.11 (one that runs and has venv), sets the kit up with its own setup.sh
# (which grades the bundled reference as a smoke test and fails the build unless it earns every
# point gradable on this runner), then locks the staff files to root (lock_down.sh): nothing an
# unprivileged user can read names a hidden test or holds the course's hidden seed.
set -euo pipefail
ROOT=${AUTOGRADER_ROOT:-/autograder}
KIT="$ROOT/source/kit"

runs() {  # a Python that runs, is >= 3.11 and can make a venv
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}
pick_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then
            if runs "$candidate"; then echo "$candidate"; return 0; fi
            echo "[gradescope] skipping $(command -v "$candidate"): it does not run, is older than 3.11 or lacks venv" >&2
        fi
    done
    return 1
}
python=$(pick_python) || python=""
if [ -z "$python" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq python3 python3-venv python3-dev gcc >/dev/null
    python=$(pick_python) || python=""
fi
if [ -z "$python" ]; then
    echo "[gradescope] no runnable Python >= 3.11 with venv found: choose an Ubuntu 24.04 base image" >&2
    exit 1
fi
echo "[gradescope] Python: $(command -v "$python") ($("$python" --version 2>&1))"
if [ "${CS336_SETUP_PICK_PYTHON_ONLY:-}" = 1 ]; then exit 0; fi  # for the kit's selftest of this choice

if ! command -v nvidia-smi >/dev/null 2>&1; then
    # pip would otherwise download PyTorch's CUDA build (gigabytes) for a runner without a GPU
    export PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL:-https://download.pytorch.org/whl/cpu}
fi

chmod -R a+rX "$ROOT/source"
cd "$KIT"
# --expect-full, plus any flags the caller set (the kit's emulation of this runner limits the problems)
PYTHON="$python" CS336_SETUP_GRADE_FLAGS="--expect-full ${CS336_SETUP_GRADE_FLAGS:-}" bash setup.sh

bash autograder/gradescope/lock_down.sh "$KIT"
echo "[gradescope] setup finished"
