"""Run one submission on the training-step board: start the ranks, compute the truth, judge, report.

Read by ``__main__.py`` and leaderboard/tests/test_training_step_cpu.py. The submission runs
only in the ranks (started by part 2's launcher); this process computes the trusted run (in
this process, or on configs that do not fit one, trusted_fsdp.py's ranks) and makes the verdict. A ``--cpu`` run uses the tiny config with gloo on the CPU; the official run uses
NCCL on two GPUs.
"""

from __future__ import annotations

import dataclasses
import platform
import statistics
import time
import types
from datetime import datetime, timezone
from pathlib import Path

from harness import gpus
from executor.probes.parallel_launch import launch
from harness.submission import submission_hash

from leaderboard.parent import LINK_ROOTS
from leaderboard.store import STORE_DIR, append_record

from .config import CONFIGS, StepConfig

DEFAULT_STORE = STORE_DIR / "training_step.jsonl"
"""The training-step board's records (the FlashAttention board's store format, a file of its own)."""
CHECKS = ("gate", "different_model", "no_update", "no_communication", "work_skipped_when_timed")
from .trusted import trusted_run
from .trusted_fsdp import trusted_fsdp_run
from .verdict import judge


@dataclasses.dataclass
class Outcome:
    """What one run gives: accepted or not, the reasons, the time (median over calls, slowest rank's)."""

    accepted: bool
    reasons: list[str]
    median_ms: float | None
    times_ms: list[list[float]]
    config: str
    backend: str
    seconds: float
    peak_bytes: int | None = None  # CUDA: the largest peak memory of any rank (the model's weights included)


def run(submission: str | Path, config: StepConfig | str = "tiny", *, backend: str = "gloo") -> Outcome:
    """Run ``submission`` (a directory holding adapters.py) on ``config``; never raises for the submission's faults.

    The truth is trusted.py's single-process run where ``config.trusted_fits``, else
    trusted_fsdp.py's FSDP run on ``config.world_size`` processes of ``backend`` (started after
    the submission's ranks are done; it raises RuntimeError if it fails, a fault of the harness).
    """
    config = CONFIGS[config] if isinstance(config, str) else config
    adapters_file = Path(submission).resolve() / "adapters.py"
    if not adapters_file.is_file():
        raise FileNotFoundError(f"{submission} is not a submission: it has no adapters.py")
    began = time.monotonic()
    settings = config.as_dict()
    result = launch(lambda: types.SimpleNamespace(__file__=str(adapters_file)),
                    "training_step.run_rank", config.world_size, {"config": settings},
                    backend=backend, timeout_s=config.time_limit_s)
    seconds = time.monotonic() - began

    def refused(reasons):
        return Outcome(False, reasons, None, [], config.name, backend, seconds)

    if result["timed_out"]:
        return refused([f"time_limit: the run did not finish within {config.time_limit_s:.0f} s"])
    if result["errors"]:
        return refused([f"crash: rank {rank}: {text.strip().splitlines()[-1] if text.strip() else text}"
                        for rank, text in sorted(result["errors"].items())])
    device = "cpu" if backend == "gloo" else "cuda"
    # After the ranks have exited: on the official config the trusted run needs the same GPUs.
    truth = trusted_run(settings, device) if config.trusted_fits else trusted_fsdp_run(settings, backend)
    reasons = judge(result["ranks"], truth, settings)
    times = [r["value"]["times_ms"] for r in result["ranks"]]
    median = max(statistics.median(t) for t in times)
    peaks = [r["value"].get("peak_bytes") for r in result["ranks"]]
    peak = max(peaks) if all(p is not None for p in peaks) else None
    return Outcome(not reasons, reasons, None if reasons else median, times, config.name, backend, seconds, peak)


def stack(backend: str) -> dict:
    """The software and the devices of this run, for its record."""
    import torch

    devices = gpus.names() if backend == "nccl" else [platform.processor() or platform.machine()]
    return {"python": platform.python_version(), "torch": torch.__version__, "backend": backend, "devices": devices}


def record_of(outcome: Outcome, name: str, submission: str | Path) -> dict:
    """The store's record of ``outcome`` (leaderboard/store.py's required fields, plus the times and the stack)."""
    return {"name": name, "accepted": outcome.accepted, "refusals": outcome.reasons, "checks": list(CHECKS),
            "mode": outcome.config, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "submission_hash": submission_hash(Path(submission), LINK_ROOTS), "submission": str(submission),
            "time_ms": outcome.median_ms, "times_ms": outcome.times_ms, "run_s": round(outcome.seconds, 1),
            "peak_bytes": outcome.peak_bytes,
            "stack": stack(outcome.backend)}


def record(outcome: Outcome, name: str, submission: str | Path, store: str | Path = DEFAULT_STORE) -> dict:
    """Append ``outcome``'s record to ``store``; return it."""
    entry = record_of(outcome, name, submission)
    append_record(entry, Path(store))
    return entry
