"""One harness process of a grade: its environment, its command line, and its signed records.

Read by staff changing how a test process is started or heard. autograder/watchdog.py's watchdog
starts a ``HarnessProcess`` for each run of a chain's tests: ``autograder/harness_pytest.py``
forked from the warm zygote (or started fresh), with a clean environment (``child_env``), the
kit's pytest settings and the executor's flags (``pytest_args``), a fresh key on one pipe and
the signed records of autograder/pytest_plugin.py on another, read frame by frame
(``records``). When it ends or is killed, everything it left running under the grade's marker
or its executor's leased uid is killed too (``finish``, ``kill``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from confine import frames, uid_pool
from confine.children import describe_signal, kill_group
from autograder.gpu_quiet import ENV_VAR as GPU_LOCK_ENV
from autograder.hidden_tests.secret import SEED_ENV, course_secret
from autograder.protocol import MAX_RECORD_BYTES, ForgedRecord, Verifier, new_key
from autograder.suite_spec import SuiteSpec
from harness.cpu_clock import WALL_FACTOR


PYTEST_CONFIG = Path(__file__).resolve().parent / "grader_pytest.ini"
_FRAME_WAIT_S = 10.0  # a record frame that has started arriving must finish within this
# CS336_HIDDEN_SEED picks the hidden tests' secret seed; HYPOTHESIS_PROFILE the fuzzing profile;
# CS336_HARNESS_MEMORY_BYTES the harness's memory limit (autograder/harness_pytest.py).
# CS336_RANK_EXIT_LOG: where the part-2 checks log the ranks' exit codes (a staff count; harness/parallel_runs.py).
# CS336_REPLAY_LOG: where each replay check logs its phases' seconds (a staff diagnostic; harness/replay.py).
_PASSED_THROUGH = (
    "CUDA_", "NVIDIA_", "TRITON_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CS336_HIDDEN_SEED", "HYPOTHESIS_PROFILE", "CS336_HARNESS_MEMORY_BYTES", "CS336_AUTOTUNE", "CS336_RANK_EXIT_LOG",
    "CS336_REPLAY_LOG",
)


def base_env(threads: int) -> dict[str, str]:
    """What every test process (and the zygote) gets: nothing of the grader's own environment
    but PATH, locale, thread counts and the CUDA and Triton settings of the machine."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "OMP_NUM_THREADS": str(threads),
    }
    for name, value in os.environ.items():
        if name in env or not name.startswith(_PASSED_THROUGH):
            continue
        if name.startswith("TRITON_") and (name.endswith("_DIR") or name == "TRITON_HOME"):
            continue  # Triton's caches and dumps stay inside the grade's work dir
        env[name] = value
    return env


def child_env(spec: SuiteSpec, run_id: str) -> dict[str, str]:
    """A clean environment: ``base_env`` plus home, temp and cache folders in the grade's work dir."""
    work = spec.workdir
    env = base_env(spec.threads)
    env.update({
        "HOME": str(work / "home"),
        "TRITON_HOME": str(work / "home"),
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "TMPDIR": str(work / "tmp"),
        "XDG_CACHE_HOME": str(work / "cache"),
        "TRITON_CACHE_DIR": str(work / "cache" / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(work / "cache" / "inductor"),
        "MPLCONFIGDIR": str(work / "cache" / "matplotlib"),
        "CS336_GRADER_RUN": run_id,
    })
    if spec.gpu_lock is not None:
        env[GPU_LOCK_ENV] = str(spec.gpu_lock)
    # Every example a grade draws derives from the course's secret (harness/example_seeds.py).
    env.setdefault(SEED_ENV, course_secret())
    return env


def pytest_args(spec: SuiteSpec, files: list[Path], executor_dir: Path, uid: int | None,
                replay_uid: int | None = None) -> list[str]:
    """pytest's command line: the kit's config, the submission, and how to run its executor."""
    args = [
        "-c", str(PYTEST_CONFIG),
        "--rootdir", str(spec.kit),
        "--confcutdir", str(spec.kit),
        "-p", "no:cacheprovider",
        "-p", "_hypothesis_pytestplugin",
        "-q", "--no-header", "-rN", "--tb=short",
        "--continue-on-collection-errors",
        "--basetemp", str(spec.workdir / "pytest-tmp"),
        # where a test hung: pytest prints every thread's stack just before the wall-clock backstop
        "-o", f"faulthandler_timeout={max(1.0, WALL_FACTOR * spec.test_timeout_s - 1.5):.1f}",
        "--submission", str(spec.submission),
        "--isolate", "--executor-dir", str(executor_dir),
        "--executor-limits", json.dumps(spec.executor_limits),
        # the executor gives up first, so that the harness can still report the test (the watchdog kills at the limit)
        "--executor-timeout", f"{max(spec.test_timeout_s - 3.0, 0.75 * spec.test_timeout_s):.1f}",
    ]
    if uid is not None:
        args += ["--executor-uid", str(uid), "--executor-gid", str(uid)]
    if replay_uid is not None:  # the replay of Triton kernels runs as a user the executor's cannot reach
        args += ["--replay-uid", str(replay_uid)]
    if spec.replay_cache is not None:  # one Triton cache for the grade's replays: a kernel compiles once a grade
        args += ["--replay-cache", str(spec.replay_cache)]
    if spec.keyword:
        args += ["-k", spec.keyword]
    return args + [str(path) for path in files]


class HarnessProcess:
    """One pytest process (the harness) and the verified records it sends."""

    def __init__(self, spec: SuiteSpec, files: list[Path], run_only: list[str] | None, index: int):
        key = new_key()
        self.verifier = Verifier(key)
        key_read, key_write = os.pipe()
        self.record_read, record_write = os.pipe()
        self.run_id = os.urandom(8).hex()
        run_only_arg = "-"
        if run_only is not None or spec.pool is not None:
            path = spec.private_dir / f"{spec.name}{spec.shard}-run{index}.json"
            pool = spec.pool.as_json() if spec.pool is not None else None
            path.write_text(json.dumps({"nodeids": run_only, "pool": pool}))
            run_only_arg = str(path)
        self.log_path = spec.private_dir / f"{spec.name}{spec.shard}-run{index}.log"
        self.lease = uid_pool.lease(start=os.getpid() + index) if spec.executor_uids else None
        self.replay_lease = uid_pool.lease(start=os.getpid() + index + 1) \
            if spec.executor_uids and spec.replay_uid is None else None
        uid = self.lease.uid if self.lease else None
        executor_dir = spec.workdir / f"executor-{spec.name}{spec.shard}-{index}"
        log = open(self.log_path, "wb")
        script = str(Path(__file__).resolve().parent / "harness_pytest.py")
        env = child_env(spec, self.run_id)
        arguments = pytest_args(spec, files, executor_dir, uid,
                                self.replay_lease.uid if self.replay_lease else spec.replay_uid)
        zygote = spec.zygote if spec.zygote is not None and spec.zygote.alive else None
        self.process = None
        if zygote is not None:
            argv = [script, str(spec.kit), "3", "4", run_only_arg, "--", *arguments]
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                self.process = zygote.spawn(argv, env, spec.workdir,
                                            {0: null, 1: log.fileno(), 2: log.fileno(), 3: key_read, 4: record_write})
            except (OSError, RuntimeError):
                self.process = None  # the zygote is gone: start this one fresh
            finally:
                os.close(null)
        if self.process is None:
            command = [sys.executable, "-I", "-B", script, str(spec.kit), str(key_read), str(record_write), run_only_arg,
                       "--", *arguments]
            self.process = subprocess.Popen(
                command, cwd=spec.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(key_read, record_write), start_new_session=True,
            )
        log.close()
        os.close(key_read)
        os.close(record_write)
        os.write(key_write, key)
        os.close(key_write)
        self.eof = False
        self.spec = spec

    def records(self, timeout: float):
        """Verified records that arrive within ``timeout`` seconds (raises ForgedRecord).

        Each record is one frame (autograder/protocol.py); every frame already waiting is read.
        A frame cut off by the test process's death, or one that starts and does not finish
        within ``_FRAME_WAIT_S``, is a broken record, as is one over ``MAX_RECORD_BYTES``."""
        if self.eof:
            return []
        ready, _, _ = select.select([self.record_read], [], [], max(0.0, timeout))
        if not ready:
            if self.process.poll() is not None:  # exited, but a leftover process may hold the pipe open
                ready, _, _ = select.select([self.record_read], [], [], 0.5)
                if not ready:
                    self.eof = True
                    return []
            else:
                return []
        records = []
        while ready:
            try:
                payload = frames.read_frame(self.record_read, deadline=time.monotonic() + _FRAME_WAIT_S,
                                            limit=MAX_RECORD_BYTES)
            except frames.Truncated as error:
                self.eof = True
                raise ForgedRecord(f"a record cut off: {error}") from error
            except frames.Closed:
                self.eof = True
                break
            except (frames.TimedOut, frames.ProtocolError) as error:
                raise ForgedRecord(f"a broken record: {error}") from error
            records.append(self.verifier.verify(payload))
            ready, _, _ = select.select([self.record_read], [], [], 0)
        return records

    def kill(self) -> None:
        kill_group(self.process.pid)
        self.process.wait()
        self._sweep()

    def _sweep(self) -> None:
        _sweep(self.run_id)
        for lease in (self.lease, self.replay_lease):
            if lease is not None:
                lease.release()  # kills every process of the executor's (or the replay's) uid
        self.lease = self.replay_lease = None

    def finish(self) -> int:
        """Wait for the process to end (it closed its pipe), then clean up; return its exit status."""
        try:
            status = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            status = self.process.returncode
        kill_group(self.process.pid)  # leftovers of the group
        self._sweep()
        os.close(self.record_read)
        return status

    def output_tail(self, lines: int = 20) -> str:
        """The end of what the process printed; for a crash, Python's fatal-error report, our frames first."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(max(0, os.path.getsize(self.log_path) - 65536))
                text = handle.read().decode(errors="replace")
        except OSError:
            return ""
        all_lines = text.rstrip().splitlines()
        for marker in ("Fatal Python error", "Timeout ("):
            starts = [i for i, line in enumerate(all_lines) if marker in line]
            if starts:
                report = all_lines[starts[-1]:]
                report[0] = report[0][report[0].index(marker):]
                library = ("/site-packages/", "/lib/python3", "<frozen ")
                kept = [line for line in report if not any(part in line for part in library)]
                return "\n".join(kept[:lines])
        return "\n".join(all_lines[-lines:])


def _sweep(run_id: str) -> None:
    """Kill what a test process left running under this user: every process carrying our run marker."""
    marker = f"CS336_GRADER_RUN={run_id}".encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def describe_exit(status: int | None) -> str:
    if status is None:
        return "was killed"
    if status < 0:
        name, hint = describe_signal(status)
        return f"died with {name}" + (f" ({hint})" if hint != name else "")
    return f"exited with status {status} (the code called sys.exit or os._exit, or Python aborted)"
