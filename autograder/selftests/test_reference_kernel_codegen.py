"""The reference Triton kernels compile for Hopper (sm_90) without register spills and without
serialised wgmmas, checked offline with ptxas (no GPU needed).

Staff only. Both defects cost speed, not correctness, so no correctness test would notice them:
in the dK/dV kernel the order of its query loops alone decides whether ptxas serialises every
wgmma (ptxas info C7515), which cost it 0.5 ms of 2.6 at the leaderboard shape on an H200
(benchmarks/NOTES.md). The other tests prove the check can fail, on two copies of the kernel
file that ptxas serialises: the diagonal loop moved back before the mask-free loop (d = 128), and
the paired load of the row statistics forced at d = 128, where ``paired_stats_load`` refuses it.
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


def _paired_stats_everywhere(source: str) -> str:
    """The kernel file with the dK/dV kernel's paired statistics load used at every head dim."""
    snippet = "    return d <= 64\n"
    assert source.count(snippet) == 1, f"paired_stats_load no longer reads {snippet!r}; update this test"
    return source.replace(snippet, "    return True\n")


def test_the_check_catches_the_serialising_loop_order(tmp_path):
    # At d = 64 the paired statistics load happens to keep even this order async; d = 128 does not.
    variant = tmp_path / "flash_attention_triton.py"
    variant.write_text(_diagonal_loop_first(KERNEL_FILE.read_text()))
    [report] = _reports("dkdv", "32", "128", "8", "2", "--d", "128", "--source", str(variant))
    assert report["serialised"], f"expected C7515 for the diagonal-first loop order; ptxas said:\n{report['ptxas_info']}"


def test_the_check_catches_the_paired_statistics_load_at_d128(tmp_path):
    variant = tmp_path / "flash_attention_triton.py"
    variant.write_text(_paired_stats_everywhere(KERNEL_FILE.read_text()))
    [report] = _reports("dkdv", "32", "128", "8", "2", "--d", "128", "--non-causal", "--source", str(variant))
    assert report["serialised"], f"expected C7515 for the paired load at d = 128; ptxas said:\n{report['ptxas_info']}"
