"""Batch-grade a fake Gradescope export with one GPU, then two, and check the scores against single grades.

Run from the repo root as root: ``python3 gpu_checks/batch_throughput.py OUTDIR PROBLEMS [GPUS]``
(GPUS: comma-separated GPU counts, default ``1,2``; ``1`` on a one-GPU machine). Builds the export
of autograder/selftests/fake_export.py (the reference, the stubs, two mutants, an attack, a
corrupt zip, a submission without adapters) plus a submission that autotunes its Triton kernel
(fixtures/fairness/autotuned_triton), runs ``python -m autograder batch`` on it with each
``--gpus`` (same ``--problems``, ``""`` for all; with ``--partial``, so that a one-GPU run of
every problem still writes the CSV of what it graded, leaving out part 2's two-GPU points),
prints each run's wall time and submissions per hour per GPU and writes them as a Markdown
table to OUTDIR/throughput.md, then grades the reference's submission alone and checks that
every CSV total of each batch run equals its submission's results.json score and that the
reference's equals the single grade's. Exit 1 on any mismatch.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from autograder.selftests.fake_export import EXPORT_DIR, build_export  # noqa: E402


def _batch(export: Path, out: Path, gpus: int, problems: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out), "--gpus", str(gpus),
                    "--problems", problems, "--partial",
                    "--secret", "gpu-check-course-secret"], cwd=KIT, check=False)
    return time.monotonic() - started


def _csv_matches(out: Path, scores: dict[str, float]) -> bool:
    """Every row's Total Score equals the score of its submission's results.json."""
    rows = list(csv.DictReader(open(out / "scores.csv")))
    wrong = [row for row in rows if row["Submission"] in scores and abs(float(row["Total Score"] or 0)
                                                                         - scores[row["Submission"]]) > 1e-3]
    print(f"  {len(rows)} CSV rows; rows whose total differs from their results.json: {wrong}")
    return not wrong


AUTOTUNING = {"submission_281934088": ("fairness:autotuned_triton", [("Donald Knuth", "05550109", "knuth@stanford.edu")])}


def main(out: Path, problems: str, gpu_counts: tuple[int, ...]) -> int:
    work = Path(tempfile.mkdtemp(prefix="batch-gpu-"))
    work.chmod(0o755)
    out.mkdir(parents=True, exist_ok=True)
    export = build_export(work, extra=AUTOTUNING)
    seconds = {gpus: _batch(export, out / f"gpus{gpus}", gpus, problems) for gpus in gpu_counts}
    count = len([p for p in (work / "export" / EXPORT_DIR).iterdir() if p.is_dir()])
    rows = ["| GPUs | submissions | problems | wall s | submissions per hour | per hour per GPU |",
            "| --- | --- | --- | --- | --- | --- |"]
    for gpus, wall in seconds.items():
        print(f"{gpus} GPU(s): {count} submissions in {wall:.0f} s = {count * 3600 / wall:.0f} submissions per hour")
        rows.append(f"| {gpus} | {count} | {problems or 'all'} | {wall:.0f} | {count * 3600 / wall:.0f} | "
                    f"{count * 3600 / wall / gpus:.0f} |")
    (out / "throughput.md").write_text("\n".join(rows) + "\n")
    reference = work / "export" / EXPORT_DIR / "submission_281934011"
    subprocess.run([sys.executable, "-m", "autograder", "grade", str(reference), "--out", str(out / "single"),
                    "--problems", problems, "--require-gpu", "-q"], cwd=KIT, check=False)
    single = json.loads((out / "single" / "results.json").read_text())["score"]
    ok = True
    for gpus in seconds:
        scores = {}
        for results in (out / f"gpus{gpus}" / "submissions").glob("*/results.json"):
            scores[results.parent.name] = json.loads(results.read_text())["score"]
        print(f"{gpus} GPU(s): scores by submission {scores}")
        ok &= _csv_matches(out / f"gpus{gpus}", scores)
        reference_score = next((v for k, v in scores.items() if "281934011" in k), None)
        ok &= reference_score is not None and abs(reference_score - single) < 1e-3
    print(f"single grade of the reference: {single}; batch runs agree: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    counts = tuple(int(n) for n in (sys.argv[3] if len(sys.argv) == 4 else "1,2").split(","))
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], counts))
