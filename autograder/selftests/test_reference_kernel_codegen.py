"""The reference Triton kernels compile for Hopper (sm_90) without register spills and without
serialised wgmmas, checked offline with ptxas (no GPU needed).

Staff only. Both defects cost speed, not correctness, so no correctness test would notice them:
in the dK/dV kernel the order of its query loops alone decides whether ptxas serialises every
wgmma (ptxas info C7515), which cost it 0.5 ms of 2.6 at the leaderboard shape on an H200
(benchmarks/NOTES.md). The second test proves the check can fail: a copy of the kernel file with
the diagonal loop moved back before the mask-free loop must come out serialised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
KERNEL_FILE = KIT / "reference" / "cs336_systems" / "flash_attention_triton.py"


def _reports(*args: str) -> list[dict]:
    """Run benchmarks/ptxas_report.py in its own process (it cannot run under TRITON_INTERPRET)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(KIT / "benchmarks" / "ptxas_report.py"), *args, "--json"],
                          cwd=KIT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"ptxas_report failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _describe(report: dict) -> str:
    return (f"{report['kernel']} tiles ({report['q_tile']}, {report['k_tile']}, {report['num_warps']} warps, "
            f"{report['num_stages']} stages) d={report['d']} causal={report['causal']}")


def test_shipped_configs_compile_without_spills_or_serialised_wgmmas():
    reports = _reports("--shipped")
    assert {r["kernel"] for r in reports} == {"fwd", "dkdv", "dq"} and {r["d"] for r in reports} == {64, 128}
    serialised = [_describe(r) for r in reports if r["serialised"]]
    assert not serialised, f"ptxas serialised the wgmmas (C7515) of: {serialised}; see benchmarks/NOTES.md"
    spilling = [f"{_describe(r)}: {r['spill_bytes']} B" for r in reports if r["spill_bytes"]]
    assert not spilling, f"register spills in: {spilling}"


def _diagonal_loop_first(source: str) -> str:
    """The dK/dV kernel with its causal diagonal loop moved back before the mask-free loop."""
    def find(snippet: str, start: int = 0) -> int:
        assert source.count(snippet) >= 1, f"the kernel file no longer contains {snippet!r}; update this test"
        return source.index(snippet, start)

    mask_free = find("    for q_start in range(diag_end, full_end, Q_TILE_SIZE):")
    causal = find("    if IS_CAUSAL:\n        for q_start in range(start, diag_end, Q_TILE_SIZE):", mask_free)
    tail = find("        for q_start in range(tail_start, N_QUERIES, Q_TILE_SIZE):", causal)
    end = find("\n    dk = dk * scale", tail)
    return (source[:mask_free] + source[causal:tail] + source[mask_free:causal]
            + "    if IS_CAUSAL:\n" + source[tail:end] + source[end:])


def test_the_check_catches_the_serialising_loop_order(tmp_path):
    variant = tmp_path / "flash_attention_triton.py"
    variant.write_text(_diagonal_loop_first(KERNEL_FILE.read_text()))
    [report] = _reports("dkdv", "64", "64", "4", "3", "--source", str(variant))
    assert report["serialised"], f"expected C7515 for the diagonal-first loop order; ptxas said:\n{report['ptxas_info']}"
