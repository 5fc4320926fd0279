"""The trusted parent of a leaderboard run: snapshot the submission, run the worker in a
sandbox, judge what it reports, store a record.

Staff read this file to know what is recorded and where the submission's code runs. The
submission never runs in this process. The parent reads the submission's files once, by the
grader's rule (harness/submission.py; a submission with a file that breaks it is not timed), into
its own copy: the hash, the Triton kernel names and the sandbox's copy all come from those bytes;
leases a sandbox uid (``worker_setup``; without root it refuses to run unless ``same_user``), and
starts the worker there with a clean environment, a seed for every checked input, the
submission's kernel names and one pipe. Nothing else of the parent reaches the worker: not the
store's path, not the parent's environment, not the kit (the worker's modules are copied). The
worker's output is relayed line by line, stripped of control characters. When the worker has
exited, ``verdict.judge`` turns what came through the pipe, and how the worker ended, into the
record.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.submission import files_hash, kit_link_roots, read_submission

from leaderboard.config import WORKER_TIMEOUT_S
from leaderboard.store import ROOT, append_record
from confine.children import kill_group

# The worker's entry point: only the sandbox's copy of the worker's modules on the path, and
# Python started with -I (no PYTHON* variables, no user site, no current directory on the path).
BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from leaderboard.worker_boot import main; sys.exit(main())"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# torch.profiler's trace lines (``USDT:2026-12-04 17:19:17 31881:31881 SyncActivityProfilerHandler.cpp:52]
# profiler_start``): the worker's own profiling (leaderboard/kernels.py), noise to whoever reads a run
PROFILER_NOISE = re.compile(r"^USDT:\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \w+\.cpp:\d+\] ")
# Where a submission's symbolic links may point besides into itself: the kit's own student files
# (the reference links to them). The fixtures are run materialized, their links resolved.
LINK_ROOTS = tuple(kit_link_roots(ROOT))


def submission_files(directory: Path) -> dict[str, bytes]:
    """The parent's own copy of a submission: relative path -> bytes of each of its files, as
    harness/submission.py reads them (the grader's rule: links only into the submission or
    ``LINK_ROOTS``, each file within its size limit).

    Raises SubmissionError, naming each file and the fix, when a file of the submission breaks
    that rule: the leaderboard times a submission whole or not at all.
    """
    return read_submission(directory, LINK_ROOTS).whole()


def _display_path(directory: Path) -> str:
    try:
        return directory.relative_to(ROOT).as_posix()
    except ValueError:
        return str(directory)


def _relay(stream, out) -> None:
    """Copy the worker's output to ``out`` line by line, without control characters or the
    profiler's trace lines (PROFILER_NOISE)."""
    for raw in iter(stream.readline, b""):
        line = CONTROL.sub("", raw.decode("utf-8", "replace").rstrip("\r\n"))[:2000]
        if PROFILER_NOISE.match(line):
            continue
        out.write(f"  | {line}\n")
        out.flush()


class _Reader(threading.Thread):
    """Reads the worker's messages as they arrive (each stamped on arrival)."""

    def __init__(self, fd: int, limit: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.limit = limit
        self.messages = []
        self.error: str | None = None

    def run(self) -> None:
        from leaderboard.protocol import ProtocolError, read_message

        try:
            while (message := read_message(self.fd)) is not None:
                self.messages.append(message)
                if len(self.messages) > self.limit:
                    self.error = f"more than the {self.limit} messages a run has"
                    return
        except ProtocolError as error:
            self.error = str(error)
        except (OSError, ValueError) as error:
            self.error = f"the pipe failed: {error}"
        finally:
            os.close(self.fd)


def run_worker(files: dict[str, bytes], run, timeout_s: float, identity):
    """Run the worker on a sandbox copy of ``files`` as ``identity``; return what the parent
    observed (``verdict.Observed``)."""
    from leaderboard.worker_setup import clear_uid, make_sandbox, remove_sandbox, worker_env
    from leaderboard.verdict import Observed, expected_script

    dirs = make_sandbox(files, identity)
    channel_read, channel_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        command = [sys.executable, "-I", "-B", "-c", BOOT, str(dirs.kit), str(dirs.submission), "--mode", run.mode]
        command += ["--repeats", str(run.repeats), "--seed", str(run.seed), "--channel-fd", str(channel_write)]
        command += ["--triton-names", ",".join(sorted(run.triton_names))]
        if identity.isolated:
            command += ["--confine", f"{identity.uid}:{identity.gid}", "--views", str(dirs.views)]
        # Its own session, so that a timeout ends the worker and everything it started.
        process = subprocess.Popen(
            command,
            cwd=dirs.work,
            env=worker_env(run.mode, dirs),
            stdin=subprocess.DEVNULL,
            stdout=output_write,
            stderr=output_write,
            pass_fds=(channel_write,),
            start_new_session=True,
        )
        os.close(channel_write)
        os.close(output_write)
        channel_write = output_write = -1
        reader = _Reader(channel_read, limit=len(expected_script(run)))
        relay = threading.Thread(target=_relay, args=(open(output_read, "rb", closefd=True), sys.stderr), daemon=True)
        channel_read = output_read = -1
        reader.start()
        relay.start()
        deadline = time.monotonic() + timeout_s
        timed_out = False
        while process.poll() is None:
            if reader.error is not None:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            try:
                process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        status = process.poll()
        if status is None:
            kill_group(process.pid)
            process.wait()
        kill_group(process.pid)  # whatever the worker left behind dies too, so that the pipes end
        clear_uid(identity)
        reader.join(timeout=10)
        relay.join(timeout=5)
        return Observed(list(reader.messages), reader.error, None if timed_out else status, timed_out, timeout_s)
    finally:
        for fd in (channel_read, channel_write, output_read, output_write):
            if fd >= 0:
                os.close(fd)
        remove_sandbox(dirs)


def parent_matmul(mode: str):
    """A function measuring the matmul rate in this process: (TFLOP/s, label)."""
    from leaderboard import config
    from leaderboard.timing import matmul_tflops
    from leaderboard.timer_guard import capture_clock

    def measure():
        problem = config.CPU_PROBLEM if mode == "cpu" else config.LEADERBOARD
        settings = {"official": config.OFFICIAL, "quick": config.QUICK, "cpu": config.CPU_TIMING}[mode]
        return matmul_tflops(problem, settings, capture_clock(mode != "cpu"))

    return measure


def parent_replay(files: dict[str, bytes], run, isolated: bool):
    """A function judging the worker's launch record (``replay.replay_verdict``) on the parent's
    own gate inputs and float64 O, from the parent's own copy of the source, as a uid of its own
    (``isolated``) or as this user."""
    from contextlib import nullcontext

    from leaderboard.gate import check_inputs
    from leaderboard.replay import replay_verdict
    from leaderboard.worker_setup import Identity, lease_uid
    from harness.flash_reference import attention_float64

    def judge_record(record, forward: int, time_ms: float | None):
        p = run.problem
        q, k, v, do = check_inputs(p, run.seed, "gate", 4).unbind(0)
        reference_O = attention_float64(q, k, v, p.is_causal).O
        sources = {path: data.decode(errors="replace") for path, data in files.items() if path.endswith(".py")}
        with lease_uid() if isolated else nullcontext(Identity(None, None)) as identity:
            return replay_verdict(record, forward, sources, {"Q": q, "K": k, "V": v, "dO": do}, reference_O,
                                  time_ms=time_ms, uid=identity.uid, allowance=run.limits.faster_than_kernels,
                                  rep_ms=run.limits.replay_rep_ms, interpret=run.mode == "cpu")

    return judge_record


def run_submission(
    directory: Path,
    name: str,
    mode: str = "official",
    repeats: int = 1,
    store: Path | None = None,
    timeout_s: float | None = None,
    same_user: bool = False,
) -> dict:
    """Check and time one submission; return its record (appended to ``store`` unless None).

    Raises ``worker_setup.SandboxUnavailable`` when the worker cannot be isolated: the parent is not
    root and ``same_user`` is False, or ``worker_setup.preflight`` finds the isolation would not hold;
    ``SubmissionError`` when a file of the submission breaks the rules (``submission_files``).
    """
    from contextlib import nullcontext

    from leaderboard.kernels import submission_triton_names
    from leaderboard.worker_setup import SAME_USER_HINT, Identity, SandboxUnavailable, is_root, lease_uid, preflight
    from leaderboard.verdict import Run, judge

    directory = Path(directory).resolve()
    started = time.monotonic()
    files = submission_files(directory)
    run = Run(mode, repeats, secrets.randbits(31), submission_triton_names(files))
    if not is_root() and not same_user:
        raise SandboxUnavailable(f"the leaderboard runs as uid {os.geteuid()}, not root: {SAME_USER_HINT}")
    with lease_uid() if is_root() else nullcontext(Identity(None, None)) as identity:
        preflight(identity, store)
        observed = run_worker(files, run, timeout_s or WORKER_TIMEOUT_S[mode], identity)
    if observed.messages and observed.messages[0].type == "isolation_failed":
        raise SandboxUnavailable(f"the worker could not confine itself: {str(observed.messages[0].header.get('message'))[:2000]}")
    judgement = judge(observed, run, parent_matmul(mode), parent_replay(files, run, is_root()))
    record = judgement_record(judgement, run)
    record.update(
        name=name,
        submission=_display_path(directory),
        submission_hash=files_hash(files),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        isolation=f"uid {identity.uid}" if identity.isolated else "none (--same-user)",
        run_s=round(time.monotonic() - started, 1),
    )
    if store is not None:
        append_record(record, store)
    return record


def judgement_record(judgement, run) -> dict:
    """The record's fields from a judgement: the parent's environment, the problem, the seed,
    refusals, checks and whatever the judgement measured; ``accepted`` when nothing refused."""
    from leaderboard.machine import environment

    return {
        "mode": run.mode,
        "repeats": run.repeats,
        "seed": run.seed,
        "problem": run.problem.describe(),
        "environment": environment(),
        "triton_kernels": sorted(run.triton_names),
        **judgement.fields,
        "refusals": judgement.refusals,
        "checks": judgement.checks,
        "accepted": not judgement.refusals,
    }


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
