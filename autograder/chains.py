"""Running a grade's test process chains: how many at a time, in which order, and what they took.

Read by staff who change how a grade spends its machine. autograder/schedule.py says how many
chains the grade gets; here the chains run, ``jobs`` at a time (each in a watchdog thread running
autograder/watchdog.py's ``run_suite``), sharing the GPU (a test marked ``alone_on_gpu`` gets it to
itself: autograder/gpu_quiet.py);
the test processes fork from one warm zygote per grader process (autograder/zygote.py); the
chains, which share out every test of the grade, hidden and visible (autograder/test_pool.py),
merge back into one result per suite; and two console lines say what each
chain and each test file took (for autograder/test_durations.toml).
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from autograder.cpus import usable_cpus
from autograder.harness_process import base_env
from autograder.suite_spec import suite_of
from autograder.watchdog import SuiteRun, SuiteSpec, Verdict, run_suite
from autograder.zygote import Zygote
from harness import gpus

GPU_JOBS_MAX = 16  # process chains at a time on a GPU runner, at most
GPU_GIB_PER_JOB = 8  # GPU memory set aside per chain (see default_jobs)


def gpu_memory_gib() -> float | None:
    """The smallest GPU's memory in GiB according to nvidia-smi, or None if it cannot say."""
    sizes = [gpu.memory_mib for gpu in gpus.listed()]
    return min(sizes) / 1024 if sizes and None not in sizes else None


def default_jobs() -> int:
    """Test process chains at a time when --jobs is not given.

    CPU runner: up to 4, at most the CPUs it may use (``usable_cpus``: affinity and cgroup quota).

    GPU runner: up to 16, at most one per CPU and one per 8 GiB of GPU memory, but never fewer
    than 2 (2 if nvidia-smi cannot say). A test process is busy on one CPU most of the time
    (Triton and inductor compile there, each test process its own kernels, and the GPU waits on
    them): on a 16-core H200, 8 chains left half the CPUs idle and the reference's whole grade
    took 79 s; 12 took 64 s and 16 took 48 s, the same points each time
    (records/2026-12-03-h200-grade-opening-and-chains/). 8 GiB per chain: with 12 or 16 chains
    the GPU held at most 53 GiB, the largest test process (the hidden out-of-memory CLI test)
    about 30 GB for a moment, every other one a few GB.

    Sharing one GPU among chains leaves the verdicts alone: the GPU memory checks read the test
    process's own counters (torch.cuda.memory_allocated, its own memory snapshot), which other
    processes do not move; the out-of-memory checks ask for far more than the GPU holds; the
    other GPU checks compare values, not times. The only verdicts that compare or bound GPU
    timings (§2.1's sweep: the forward at 4096 tokens slower than at 1024, forward and backward
    under 100 ms) are in tests marked ``alone_on_gpu``, during which no other test of the grade
    runs (autograder/gpu_quiet.py).
    """
    cpus = usable_cpus()
    if not gpus.driver_present():
        return min(4, cpus)
    memory = gpu_memory_gib()
    by_memory = 2 if memory is None else max(2, int(memory // GPU_GIB_PER_JOB))
    return max(1, min(GPU_JOBS_MAX, by_memory, cpus))


_ZYGOTES: dict[tuple, Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()  # grades run side by side in threads (the selftests) share one zygote


def zygote_for(kit: Path, threads: int) -> Zygote | None:
    """A live zygote for these settings (started once per grader process), or None if it cannot start."""
    if os.environ.get("CS336_GRADER_ZYGOTE", "1") == "0":
        return None
    with _ZYGOTES_LOCK:
        return _start_zygote(kit, threads)


def _start_zygote(kit: Path, threads: int) -> Zygote | None:
    key = (sys.executable, str(kit))  # children set their own thread count
    zygote = _ZYGOTES.get(key)
    if zygote is not None and zygote.alive:
        return zygote
    home = Path(tempfile.mkdtemp(prefix="cs336-zygote-"))
    env = {**base_env(threads), "HOME": str(home), "TMPDIR": str(home)}
    try:
        zygote = Zygote(sys.executable, kit, env, home)
    except (OSError, RuntimeError):
        return None
    _ZYGOTES[key] = zygote
    atexit.register(zygote.close)
    return zygote


def chain_times(chains, specs: list[SuiteSpec], runs: list[SuiteRun]) -> str:
    """One console line: each chain's wall seconds against its expected seconds (to refresh
    autograder/test_durations.toml), longest first, and how many tests of which files it ran."""
    by_chain = {(run.name, run.shard): run for run in runs}
    parts = []
    for chain, spec in sorted(zip(chains, specs), key=lambda pair: -pair[0].expected_s):
        run = by_chain.get((spec.name, spec.shard))
        ran: dict[str, int] = {}
        for nodeid in (run.outcomes if run else {}):
            name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            ran[name] = ran.get(name, 0) + 1
        names = ", ".join(f"{name} x{count}" for name, count in ran.items())
        parts.append(f"{chain.suite}#{chain.index} {run.wall_s if run else 0.0:.0f} s "
                     f"(expected {chain.expected_s:.0f}): {names or 'no tests'}")
    return "grade: chain times: " + "; ".join(parts)


FILE_TIMES_LINE = "grade: test time per file: "  # read back by autograder/tools/time_test_files.py


def file_test_times(runs: list[SuiteRun]) -> str:
    """One console line: the summed test durations of each test file, longest first (the part of
    a file's time in autograder/test_durations.toml that excludes its process start)."""
    seconds: dict[str, float] = {}
    for run in runs:
        for nodeid, verdict in run.outcomes.items():
            file = nodeid.split("::", 1)[0]
            seconds[file] = seconds.get(file, 0.0) + verdict.duration
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    return FILE_TIMES_LINE + "; ".join(f"{file} {total:.1f} s" for file, total in ranked)


def run_chains(specs: list[SuiteSpec], jobs: int,
               on_chain_end: Callable[[str], None] = lambda suite: None) -> list[SuiteRun]:
    """Run the chains, ``jobs`` at a time in the given order, each in its own watchdog thread;
    ``on_chain_end(suite)`` after each chain ends."""
    results: list[SuiteRun | None] = [None] * len(specs)
    queue = list(enumerate(specs))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, spec = queue.pop(0)
            try:
                results[index] = run_suite(spec)
            except Exception as error:  # noqa: BLE001 - a grader bug must cost this shard, not the grade
                failed = SuiteRun(spec.name, files=[p.relative_to(spec.kit).as_posix() for p in spec.files],
                                  shard=spec.shard)
                failed.startup_failure = f"the grader failed while running these tests: {type(error).__name__}: {error}"
                results[index] = failed
            on_chain_end(spec.name)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(jobs, len(specs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [run for run in results if run is not None]


UNRUN = "no test process of this grade ran this test or gave it a verdict (its claim was taken elsewhere)"


def merge(runs: list[SuiteRun]) -> list[SuiteRun]:
    """One SuiteRun per suite, visible and hidden (from each test's path: ``suite_of``; a chain runs
    tests of both), its chains merged, in file order. A test some chain collected but no chain gave
    a verdict fails with ``UNRUN``."""
    merged: dict[str, SuiteRun] = {}
    for run in runs:
        suites = sorted({suite_of(name) for name in [*run.outcomes, *run.files, *run.collected,
                                                    *(nodeid for nodeid, _ in run.collect_errors)]}) or ["visible"]
        for position, suite in enumerate(suites):
            target = merged.setdefault(suite, SuiteRun(suite))
            target.outcomes.update({nodeid: verdict for nodeid, verdict in run.outcomes.items() if suite_of(nodeid) == suite})
            target.collect_errors += [error for error in run.collect_errors
                                      if suite_of(error[0]) == suite and error not in target.collect_errors]
            target.gpus = run.gpus if run.gpus is not None else target.gpus
            target.restarts += run.restarts if position == 0 else 0  # a chain's restarts, counted once
            target.wall_s = max(target.wall_s, run.wall_s)
            if run.startup_failure:
                target.files += [file for file in run.files if suite_of(file) == suite and file not in target.files]
                target.startup_failure = run.startup_failure
            target.collected += [nodeid for nodeid in run.collected if suite_of(nodeid) == suite]
    for run in merged.values():
        for nodeid in run.collected:  # claimed, yet no chain gave a verdict: never silently dropped
            run.outcomes.setdefault(nodeid, Verdict(nodeid, "failed", UNRUN))
        run.outcomes = dict(sorted(run.outcomes.items(), key=lambda item: item[0].split("::", 1)[0]))
    return list(merged.values())
