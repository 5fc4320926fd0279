"""Time the student's loop: the visible suite of a fresh release, on the stubs and on the reference.

    python -m autograder.tools.student_budget                       # print the table
    python -m autograder.tools.student_budget --out autograder/tools/student_budget.md

Read by staff after changing tests, stubs or Hypothesis settings. It builds the student release
(``python -m autograder release``), runs the student's first command there (plain ``pytest``,
on the stubs, with fresh caches), then the same in a second copy that holds the reference's
``adapters.py`` and ``cs336_systems/``, and prints a Markdown table: wall time, CPU time, the
number of lines the first ``pytest`` prints, and the slowest tests, each against its budget
(issue "The student's loop"). It is a measurement, not a test: wall times depend on the machine
and its load, which the table states.

Budgets, on a 2-core CPU without a GPU: every stub run <= 20 s, the reference <= 60 s, no
visible test over 15 s on either, and the first ``pytest`` on a fresh release prints < 300 lines.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.student_budget")

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
BUDGET_S = {"stubs": 20.0, "reference": 60.0}
TEST_BUDGET_S = 15.0
LINES_BUDGET = 300
SLOWEST = 6


@dataclass
class Run:
    """One plain ``pytest`` in a release tree."""

    name: str
    wall_s: float
    cpu_s: float
    lines: int
    exit_code: int
    counts: dict[str, int]
    durations: list[tuple[float, str]]  # (wall seconds, node id), slowest first
    cpu: dict[str, float]  # node id: CPU seconds (autograder/tools/budget_plugin.py)
    last_line: str


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import triton

    from harness import gpus

    gpu = (gpus.names() or ["no GPU"])[0]
    return (f"{cpu}, {os.cpu_count()} cores, {gpu}; Python {platform.python_version()}, torch {torch.__version__}, "
            f"triton {triton.__version__}")


def _load() -> str:
    try:
        return "/".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "?"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pytest(tree: Path, name: str) -> Run:
    """The student's first command, ``python -m pytest``, in ``tree``, plus a JUnit report for wall
    durations and a silent plugin for CPU times (neither adds a line but the JUnit file's, dropped)."""
    junit, cpu_json = tree.parent / f"{name}.xml", tree.parent / f"{name}-cpu.json"
    env = {key: value for key, value in os.environ.items()
           if key not in ("CS336_SUBMISSION", "HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(KIT), CS336_BUDGET_CPU_JSON=str(cpu_json))
    cpu_before, start = _children_cpu_s(), time.monotonic()
    answer = subprocess.run([sys.executable, "-m", "pytest", f"--junitxml={junit}", "-p", "autograder.tools.budget_plugin"],
                            cwd=tree, env=env, capture_output=True, text=True)
    wall, cpu = time.monotonic() - start, _children_cpu_s() - cpu_before
    output = [line for line in (answer.stdout + answer.stderr).splitlines() if "generated xml file" not in line]
    (tree.parent / f"{name}-output.txt").write_text("\n".join(output) + "\n")  # kept with --keep
    durations, counts = [], {"passed": 0, "failed": 0, "skipped": 0}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            nodeid = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            durations.append((float(case.get("time", 0.0)), nodeid))
            kind = next((k for k in ("failure", "error", "skipped") if case.find(k) is not None), "passed")
            counts[{"failure": "failed", "error": "failed"}.get(kind, kind)] += 1
    durations.sort(reverse=True)
    last = next((line.strip("= ") for line in reversed(output) if line.startswith("=")), "")
    cpu_of = json.loads(cpu_json.read_text()) if cpu_json.exists() else {}
    return Run(name, wall, cpu, len(output), answer.returncode, counts, durations, cpu_of, last)


def build_trees(folder: Path) -> dict[str, Path]:
    """The release as students get it (stubs), and a copy holding the reference's submission."""
    stubs = folder / "stubs" / "student"
    subprocess.run([sys.executable, "-m", "autograder", "release", "--out", str(stubs)], cwd=KIT, check=True,
                   capture_output=True)
    reference = folder / "reference" / "student"
    shutil.copytree(stubs, reference, symlinks=False)
    shutil.rmtree(reference / "cs336_systems")
    shutil.copytree(KIT / "reference" / "cs336_systems", reference / "cs336_systems", symlinks=False)
    shutil.copy(KIT / "reference" / "adapters.py", reference / "adapters.py")
    return {"stubs": stubs, "reference": reference}


def _mark(ok: bool) -> str:
    return "ok" if ok else "**over**"


def report(runs: list[Run], machine: str, loads: tuple[str, str]) -> str:
    lines = [
        "# Student loop budget",
        "",
        f"Measured {datetime.date.today().isoformat()} with `.venv/bin/python -m autograder.tools.student_budget`: plain "
        "`pytest` in a fresh student release (no caches), on the stubs and on the reference.",
        "",
        f"Machine: {machine}. Load average (1/5/15 min) before: {loads[0]}, after: {loads[1]}. Wall times "
        "grow with the load (other work on the machine); CPU time (the pytest process and the children it "
        "waited for) hardly does, and on an idle 2-core machine a run's wall time is close to its CPU time. "
        "CPU time leaves out processes a test starts through a fork server (the distributed tests' workers).",
        "",
        "| run | wall s (budget) | CPU s (budget) | lines printed (budget) | slowest test wall s / CPU s (budget 15) | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        slowest = run.durations[0][0] if run.durations else 0.0
        slowest_cpu = max(run.cpu.values(), default=0.0)
        budget = BUDGET_S[run.name]
        lines_cell = f"{run.lines} (< {LINES_BUDGET}) {_mark(run.lines < LINES_BUDGET)}" if run.name == "stubs" else str(run.lines)
        lines.append(f"| {run.name} | {run.wall_s:.1f} (<= {budget:.0f}) {_mark(run.wall_s <= budget)} "
                     f"| {run.cpu_s:.1f} {_mark(run.cpu_s <= budget)} | {lines_cell} "
                     f"| {slowest:.1f} {_mark(slowest <= TEST_BUDGET_S)} / {slowest_cpu:.1f} {_mark(slowest_cpu <= TEST_BUDGET_S)} "
                     f"| {run.last_line} |")
    for run in runs:
        lines += ["", f"Slowest tests, {run.name}:", "", "| wall s | CPU s | test |", "| --- | --- | --- |"]
        lines += [f"| {seconds:.2f} | {run.cpu.get(nodeid, float('nan')):.2f} | `{nodeid}` |"
                  for seconds, nodeid in run.durations[:SLOWEST]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--keep", action="store_true", help="keep the release trees (their path is printed)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="cs336-budget-"))
    try:
        trees = build_trees(folder)
        before = _load()
        runs = [run_pytest(trees[name], name) for name in ("stubs", "reference")]
        table = report(runs, _machine(), (before, _load()))
    finally:
        if args.keep:
            print(f"[budget] release trees kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(table)
    if args.out:
        args.out.write_text(table)
    over = any(run.wall_s > BUDGET_S[run.name] or (run.durations and run.durations[0][0] > TEST_BUDGET_S)
               for run in runs) or runs[0].lines >= LINES_BUDGET
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
