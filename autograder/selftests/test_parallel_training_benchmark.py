"""The staff benchmark of part 2's wrappers (benchmarks/parallel_training_benchmark.py) runs end to end.

Its GPU run happens on a tight device budget (gpu_checks/run.sh parallel-bench), so a broken
script must show here first: its tiny CPU mode (2 gloo processes, a shrunken LM, one step per
wrapper) must print a row with a time for every wrapper.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
WRAPPERS = ("single", "naive", "flat", "individual", "bucketed", "fsdp")


def test_tiny_mode_times_every_wrapper(tmp_path):
    out = tmp_path / "table.md"
    done = subprocess.run(
        [sys.executable, "benchmarks/parallel_training_benchmark.py", "--tiny", "--warmup-steps", "0",
         "--measure-steps", "1", "--timeout-s", "120", "--out", str(out)],
        cwd=KIT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"the benchmark failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = {cells[0]: cells for line in out.read_text().splitlines() if line.startswith("| ")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]]}
    for wrapper in WRAPPERS:
        assert wrapper in rows, f"no row for {wrapper} in:\n{out.read_text()}"
        assert float(rows[wrapper][1]) > 0, f"{wrapper}: expected a step time in ms; got {rows[wrapper]}"
    assert rows["fsdp"][2] not in ("", "0 (baseline)"), f"the fsdp row must report its communication: {rows['fsdp']}"
