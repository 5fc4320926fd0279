#!/usr/bin/env bash
# Run the visible tests and print your local score, then write submission.zip for Gradescope.
#
#   bash make_submission.sh              # local score (python -m tests.score), then submission.zip
#   bash make_submission.sh --no-tests   # only write submission.zip
#
# The zip holds adapters.py, every .py file under cs336_systems/, small data files there
# (.json .toml .yaml .yml .txt .cfg, 1 MiB each) and, if present, writeup.pdf: exactly what the
# grader reads (harness/submission.py says which files count). Caches, checkpoints, profiles and
# other files are left out.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3

if [ "${1:-}" != "--no-tests" ]; then
    echo "[submit] running the visible tests for your local score (failures do not stop the submission)"
    "$PYTHON" -m tests.score -p no:cacheprovider || true
fi

"$PYTHON" -B - <<'PY'  # -B: packing leaves no __pycache__ in your folder
"""Write submission.zip: the files of the submission as the grader reads them, and writeup.pdf (if present)."""
import zipfile
from pathlib import Path

from harness.submission import read_submission  # which files count and their limits: the grader's own rule

MAX_PDF_BYTES = 20_000_000

if not Path("adapters.py").is_file() or not Path("cs336_systems/__init__.py").is_file():
    raise SystemExit("[submit] run this from your assignment folder: it needs adapters.py and cs336_systems/__init__.py")
read = read_submission(Path("."), link_roots=[Path("/")])  # a link is packed as the file it points to
for entry in read.broken:
    print(f"[submit] left out {entry}: the grader would not take it")
files = dict(read.files)
pdf = Path("writeup.pdf")
if pdf.is_file() and pdf.stat().st_size <= MAX_PDF_BYTES:
    files["writeup.pdf"] = pdf.read_bytes()
elif pdf.is_file():
    print(f"[submit] left out writeup.pdf: {pdf.stat().st_size / 2**20:.1f} MiB is over the {MAX_PDF_BYTES / 2**20:.0f} MiB limit")
with zipfile.ZipFile("submission.zip", "w", zipfile.ZIP_DEFLATED) as archive:
    for name, data in files.items():
        archive.writestr(name, data)
print(f"[submit] wrote submission.zip with {len(files)} files:")
for name in files:
    print(f"           {name}")
if not pdf.is_file():
    print("[submit] no writeup.pdf found: put your written answers there (or upload them separately)")
print("[submit] upload submission.zip to Gradescope")
PY
