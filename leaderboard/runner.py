"""The trusted parent of a leaderboard run: hash the submission, run the worker, store a record.

Staff read this file to know what is recorded and where the submission's code runs. The
submission never runs in this process: a worker process (``leaderboard.worker``) imports it,
checks it and times it, and writes its findings to a file this process reads back. A worker that
crashes, calls ``os._exit`` or runs out of time is recorded as refused, with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from leaderboard.config import WORKER_TIMEOUT_S
from leaderboard.store import ROOT, append_record


def submission_files(directory: Path) -> list[Path]:
    """The files that define a submission: adapters.py and cs336_systems/**/*.py, sorted."""
    files = [directory / "adapters.py"] + list((directory / "cs336_systems").rglob("*.py"))
    return sorted((f for f in files if f.is_file()), key=lambda f: f.relative_to(directory).as_posix())


def submission_hash(directory: Path) -> str:
    """sha256 over each file's relative path and contents (symlinks followed), in sorted order."""
    digest = hashlib.sha256()
    for path in submission_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _display_path(directory: Path) -> str:
    try:
        return directory.relative_to(ROOT).as_posix()
    except ValueError:
        return str(directory)


def run_worker(directory: Path, mode: str, repeats: int, timeout_s: float) -> dict:
    """Run ``python -m leaderboard.worker`` on ``directory``; return its result, or a refusal
    saying why there is none. The worker's progress goes straight to this terminal."""
    with tempfile.TemporaryDirectory(prefix="leaderboard-") as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "leaderboard.worker", str(directory), "--mode", mode, "--repeats", str(repeats), "--result", str(result_file)]
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)
        if mode == "dry-run":
            env["TRITON_INTERPRET"] = "1"
            env["OMP_NUM_THREADS"] = "1"
        else:
            # Compile in the worker itself: a pool of compile processes per run costs more to
            # start than the few kernels a submission has take to compile.
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # Its own session, so that a timeout ends the worker and everything it started.
        process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
        try:
            status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return {"refusals": [{"code": "timeout", "message": f"the run did not finish within {timeout_s:.0f} s"}], "checks": {}}
        try:
            result = json.loads(result_file.read_text())
        except (OSError, json.JSONDecodeError):
            message = (
                f"the worker exited with status {status} without a result (a crash, os._exit, "
                "a signal or running out of memory); see its output above"
            )
            return {"refusals": [{"code": "error", "message": message}], "checks": {}}
        if status != 0:
            result.setdefault("refusals", []).append({"code": "error", "message": f"the worker exited with status {status}"})
        return result


def run_submission(
    directory: Path, name: str, mode: str = "official", repeats: int = 1, store: Path | None = None, timeout_s: float | None = None
) -> dict:
    """Check and time one submission; return its record (appended to ``store`` unless None)."""
    directory = Path(directory).resolve()
    started = time.monotonic()
    result = run_worker(directory, mode, repeats, timeout_s or WORKER_TIMEOUT_S[mode])
    record = {
        **result,
        "name": name,
        "submission": _display_path(directory),
        "submission_hash": submission_hash(directory),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "repeats": repeats,
        "run_s": round(time.monotonic() - started, 1),
    }
    record["accepted"] = not record.get("refusals")
    if store is not None:
        append_record(record, store)
    return record


def describe(record: dict) -> str:
    """A few lines saying what happened: the time and rates if accepted, every reason if not."""
    head = f"{record['name']} ({record['submission']}, {record['mode']}, {record.get('run_s', '?')} s)"
    if record["accepted"]:
        lines = [
            f"ACCEPTED {head}",
            f"  time {record['time_ms']:.3f} ms (median), {record['tflops']:.1f} TFLOP/s, "
            f"{record['pct_of_matmul']:.1f}% of the {record['matmul']} matmul ({record['matmul_tflops']:.1f} TFLOP/s)",
            f"  random dO {record['random_dO_ms']:.3f} ms; fresh inputs {record['fresh_inputs_ms']:.3f} ms; "
            f"floor {record['floor_ms']:.3f} ms; spread of single calls (IQR) {record['iqr_pct']:.1f}%",
        ]
        if record.get("repeat_spread_pct") is not None:
            repeats = ", ".join(f"{t:.3f}" for t in record["repeat_ms"])
            lines.append(f"  {len(record['repeat_ms'])} timings: {repeats} ms; spread (max - min) / min = {record['repeat_spread_pct']:.2f}%")
        return "\n".join(lines)
    reasons = [f"  {r['code']}: {r['message']}" for r in record["refusals"]]
    return "\n".join([f"REFUSED {head}"] + reasons)
