#!/usr/bin/env bash
# Gradescope image setup (runs once, as root, when the autograder zip is uploaded).
#
# Installs a Python >= 3.11, sets the kit up with
# its own setup.sh (which grades the bundled reference as a smoke test and fails the build
# unless it earns every point gradable on this runner), then makes the hidden tests, the
# fixtures and the reference readable by root only.
set -euo pipefail
ROOT=${AUTOGRADER_ROOT:-/autograder}
KIT="$ROOT/source/kit"

python=""
for candidate in python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1; then python=$candidate; break; fi
done
if [ -z "$python" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq python3 python3-venv python3-dev gcc >/dev/null
    if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then python=python3; fi
fi
if [ -z "$python" ]; then
    echo "[gradescope] no Python >= 3.11 found: choose an Ubuntu 24.04 base image" >&2
    exit 1
fi
if command -v apt-get >/dev/null 2>&1 && ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get install -y -qq "${python}-venv" python3-venv >/dev/null || true
fi

# The unprivileged user that student code runs as (see README "Grading").

chmod -R a+rX "$ROOT/source"
cd "$KIT"
PYTHON="$python" CS336_SETUP_GRADE_FLAGS="--expect-full" bash setup.sh

chmod -R a+rX .venv
find autograder/hidden_tests -type d -exec chmod 711 {} +
find autograder/hidden_tests -type f -exec chmod 600 {} +
chmod 700 reference autograder/fixtures
echo "[gradescope] setup finished"
