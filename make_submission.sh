#!/usr/bin/env bash
# Run the visible tests and print your local score, then write submission.zip for Gradescope.
#
#   bash make_submission.sh              # local score (python -m tests.score), then submission.zip
#   bash make_submission.sh --no-tests   # only write submission.zip
#
# The zip holds adapters.py, every .py file under cs336_systems/, small data files there
# (.json .toml .yaml .yml .txt .cfg, 1 MiB each) and, if present, writeup.pdf: exactly what the
# grader reads. Caches, checkpoints, profiles and other files are left out.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3

if [ "${1:-}" != "--no-tests" ]; then
    echo "[submit] running the visible tests for your local score (failures do not stop the submission)"
    "$PYTHON" -m tests.score -p no:cacheprovider || true
fi

"$PYTHON" - <<'PY'
"""Write submission.zip: adapters.py, cs336_systems/**/*.py and small data files, writeup.pdf (if present)."""
import zipfile
from pathlib import Path

# The grader's limits: it leaves out anything larger, and any other kind of file.
MAX_PY_BYTES = 2 * 1024 * 1024
MAX_DATA_BYTES = 1024 * 1024
DATA_SUFFIXES = (".json", ".toml", ".yaml", ".yml", ".txt", ".cfg")
MAX_PDF_BYTES = 20_000_000

files = [Path("adapters.py")]
files += sorted(
    path for path in Path("cs336_systems").rglob("*")
    if path.is_file() and path.suffix in (".py", *DATA_SUFFIXES)
    and "__pycache__" not in path.parts and not any(part.startswith(".") for part in path.parts)
)
if Path("writeup.pdf").is_file():
    files.append(Path("writeup.pdf"))
missing = [str(path) for path in files[:1] if not path.is_file()]
if missing or not Path("cs336_systems/__init__.py").is_file():
    raise SystemExit("[submit] run this from your assignment folder: it needs adapters.py and cs336_systems/__init__.py")
kept, skipped = [], []
for path in files:
    limit = {".pdf": MAX_PDF_BYTES, ".py": MAX_PY_BYTES}.get(path.suffix, MAX_DATA_BYTES)
    size = path.stat().st_size
    (kept if size <= limit else skipped).append(path)
    if size > limit:
        print(f"[submit] left out {path}: {size / 2**20:.1f} MiB is over the grader's {limit / 2**20:.0f} MiB limit")
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
