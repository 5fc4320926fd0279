"""Time how long the shape-fuzzing tests take to find and shrink a real bug, against the grader's per-test limit.

    python -m autograder.tools.shrink_time                      # CPU: the cpu profile
    python3 -m autograder.tools.shrink_time --out FILE.md       # GPU: the gpu profile (kernels compile)

Read by staff changing Hypothesis settings (harness/hypothesis_profiles.py) or the per-test limit
(autograder/manifest.toml). A failing Hypothesis test keeps running after its first failure,
to shrink it to a minimal case; on a GPU each new shape compiles kernels, so shrinking costs
seconds an example. If it ran past the grader's limit, a student with a real bug would read
"timed out" instead of the minimal case. For each mutant below (materialised from
fixtures/mutants), this runs its fuzz test in a fresh pytest process with no example
database, and prints a Markdown table: wall time, pytest's own time, the outcome, and whether
the output holds the failing case's one-line repro. A measurement, not a test.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.shrink_time")

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixtures import materialize, mutants
from autograder.manifest import load_manifest
from harness import gpus

KIT = Path(__file__).resolve().parents[2]
FORWARD = "tests/test_flash_forward_triton.py::test_flash_forward_triton_any_shape"
BACKWARD = "tests/test_flash_backward.py::test_flash_backward_triton_any_shape"
BACKWARD_PYTORCH = "tests/test_flash_backward.py::test_flash_backward_pytorch_any_shape"
CASES = (
    ("no_key_bound_mask", FORWARD),
    ("causal_bottom_right", FORWARD),
    ("grid_from_wrong_tile_size", FORWARD),
    ("strides_assumed_contiguous", FORWARD),
    ("dk_missing_scale", BACKWARD),
    ("backward_without_causal_mask", BACKWARD_PYTORCH),  # a bug of the PyTorch Function's backward
)
"""(mutant, fuzz test node it fails): forward and backward bugs of different shapes' reach."""


def run_one(mutant: str, node: str, root: Path, limit_s: float) -> dict:
    submission = materialize(mutants.get(mutant), root / mutant)
    with tempfile.TemporaryDirectory() as work:  # a fresh .hypothesis database: no replay of earlier failures
        env = {**os.environ, "PYTHONPATH": str(KIT)}
        command = [sys.executable, "-m", "pytest", str(KIT / node), f"--submission={submission}", "-q",
                   "-p", "no:cacheprovider", "--rootdir", str(KIT), "--tb=short"]
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=limit_s)
            output, timed_out = done.stdout + done.stderr, False
        except subprocess.TimeoutExpired as expired:
            output, timed_out = (expired.stdout or b"").decode(errors="replace"), True
    wall = time.monotonic() - start
    summary = re.findall(r"\d+ (?:passed|failed)[^\n]*", output)
    return {"mutant": mutant, "wall": wall, "timed_out": timed_out, "summary": summary[-1] if summary else "",
            "repro": "rerun:" in output or "TRITON_INTERPRET=1 python" in output}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--only", nargs="+", help="mutant names (default: all of CASES)")
    args = parser.parse_args(argv)
    import torch

    limit = load_manifest().settings.test_timeout_s
    machine = (gpus.names() or [f"CPU ({os.cpu_count()} cores)"])[0]
    lines = [f"Shape-fuzz tests on mutants: {machine}, Python {platform.python_version()}, torch {torch.__version__}; "
             f"per-test limit {limit:.0f} s (each run stopped at {2 * limit:.0f} s).", "",
             "| mutant | test | wall (s) | pytest's time | outcome | repro line shown |", "| --- | --- | --- | --- | --- | --- |"]
    root = Path(tempfile.mkdtemp(prefix="shrink-time-"))
    try:
        for mutant, node in CASES:
            if args.only and mutant not in args.only:
                continue
            row = run_one(mutant, node, root, 2 * limit)
            outcome = "timed out" if row["timed_out"] else row["summary"] or "no summary"
            lines.append(f"| {mutant} | {node.split('::')[1]} | {row['wall']:.1f} | {row['summary']} | "
                         f"{outcome.split(' in ')[0]} | {'yes' if row['repro'] else 'no'} |")
            print(lines[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
