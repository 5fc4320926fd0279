#!/usr/bin/env bash
# Run the visible tests, then write submission.zip for Gradescope.
#
#   bash make_submission.sh              # run the tests, then write submission.zip
#   bash make_submission.sh --no-tests   # only write submission.zip
#
# The zip holds adapters.py, every .py file under cs336_systems/ and, if present, writeup.pdf:
# exactly what the grader reads. Caches, checkpoints, profiles and other files are left out.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3

if [ "${1:-}" != "--no-tests" ]; then
    echo "[submit] running the visible tests (failures do not stop the submission)"
    "$PYTHON" -m pytest tests -q -p no:cacheprovider || true
fi

"$PYTHON" - <<'PY'
"""Write submission.zip: adapters.py, cs336_systems/**/*.py, writeup.pdf (if present)."""
import zipfile
from pathlib import Path

MAX_PY_BYTES = 1_000_000
MAX_PDF_BYTES = 20_000_000

files = [Path("adapters.py")]
files += sorted(
    path for path in Path("cs336_systems").rglob("*.py")
    if "__pycache__" not in path.parts and not any(part.startswith(".") for part in path.parts)
)
if Path("writeup.pdf").is_file():
    files.append(Path("writeup.pdf"))
missing = [str(path) for path in files[:1] if not path.is_file()]
if missing or not Path("cs336_systems/__init__.py").is_file():
    raise SystemExit("[submit] run this from your assignment folder: it needs adapters.py and cs336_systems/__init__.py")
kept, skipped = [], []
for path in files:
    limit = MAX_PDF_BYTES if path.suffix == ".pdf" else MAX_PY_BYTES
    size = path.stat().st_size
    (kept if size <= limit else skipped).append(path)
    if size > limit:
        print(f"[submit] left out {path}: {size / 1e6:.1f} MB is over the {limit / 1e6:.0f} MB limit")
with zipfile.ZipFile("submission.zip", "w", zipfile.ZIP_DEFLATED) as archive:
    for path in kept:
        archive.write(path, path.as_posix())
print(f"[submit] wrote submission.zip with {len(kept)} files:")
for path in kept:
    print(f"           {path}")
if not Path("writeup.pdf").is_file():
    print("[submit] no writeup.pdf found: put your written answers there (or upload them separately)")
print("[submit] upload submission.zip to Gradescope")
PY
