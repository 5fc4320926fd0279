"""A warm parent for test processes: imports torch, pytest and Hypothesis once, then forks each one.

Read by staff chasing the grader's speed. Starting a test process costs seconds (torch and
Hypothesis alone take most of it), and the grader starts one per chain plus one after every
crash. The zygote is a root process, started by the grader with the same clean environment and
interpreter as any test process, that imports those libraries and then only forks: each child
sets its own environment, folder and file descriptors and runs autograder/harness_pytest.py
as if it had been started fresh. The zygote never imports test or student code and holds no
secret (each run's key reaches only its child, through a pipe). It never touches CUDA, so
children can. It is a child subreaper: a daemon that a test process leaves behind becomes the
zygote's child when that process ends, and the zygote kills it.

Protocol over a Unix socket: the grader sends one JSON request per child with its file
descriptors attached (``{"argv", "env", "cwd", "fds": [child fd numbers]}``); the zygote
answers ``{"pid": N}``, and later ``{"exit": N, "status": S}`` (S as in
``subprocess.Popen.returncode``: negative for a signal).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

_MAX_MESSAGE = 1 << 20


# -- the zygote process -----------------------------------------------------------------


def _child(request: dict, received: list[int], control: socket.socket) -> None:
    """In the forked child: become the requested test process; never returns."""
    try:
        import fcntl

        control.close()
        os.setsid()
        parked = [fcntl.fcntl(fd, fcntl.F_DUPFD, 200) for fd in received]  # out of the way of the targets
        for fd in received:
            os.close(fd)
        for target, fd in zip(request["fds"], parked):
            os.dup2(fd, target)
        for fd in parked:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        import torch

        torch.set_num_threads(max(1, int(request["env"].get("OMP_NUM_THREADS", "1"))))
        from autograder import harness_pytest

        sys.argv = list(request["argv"])
        code = harness_pytest.main(request["argv"][1:])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - report and exit, never return into the zygote loop
        import traceback

        traceback.print_exc()
        code = 70
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(control_fd: int) -> None:
    """The zygote's main loop: fork on request, report exits, stop when the grader hangs up."""
    import hypothesis  # noqa: F401 - warm imports shared by every child
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import torch  # noqa: F401

    import autograder.pytest_plugin  # noqa: F401

    control = socket.socket(fileno=control_fd)
    _become_subreaper()
    control.sendall(b'{"ready": true}\n')
    children: set[int] = set()
    buffer = b""
    rounds = 0
    while True:
        ready, _, _ = select.select([control], [], [], 0.05)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                children.discard(pid)
                control.sendall(json.dumps({"exit": pid, "status": _returncode(status)}).encode() + b"\n")
        rounds += 1
        if rounds % 10 == 0:
            _kill_orphans(children)
        if not ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE, 16)
        if not message:
            for pid in children:
                _kill_group(pid)
            return
        buffer += message
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request, fds, control)
            for fd in fds:
                os.close(fd)
            fds = []
            children.add(pid)
            control.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _become_subreaper() -> None:
    """Make processes orphaned by a test process (daemons) our children, so that we can end them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _kill_orphans(children: set[int]) -> None:
    """Kill every child of ours that is not a test process: what a test process left behind."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in children:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _kill_group(pid: int) -> None:
    """``confine.children.kill_group``, which the zygote cannot import: it runs as a script, with
    the standard library alone, before the kit is on its path."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


# -- the grader's side ------------------------------------------------------------------


class ZygoteProcess:
    """A child of the zygote, with the part of Popen's interface the grader uses."""

    def __init__(self, zygote: "Zygote", pid: int):
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        status = self._zygote.wait_for(self.pid, timeout)
        if status is None:
            raise subprocess.TimeoutExpired("zygote child", timeout)
        self.returncode = status
        return status


class Zygote:
    """The grader's handle on one zygote process (thread-safe)."""

    def __init__(self, python: str, kit: Path, env: dict[str, str], cwd: Path):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        script = Path(__file__).resolve()
        self._process = subprocess.Popen(
            [python, "-I", "-B", str(script), str(kit), str(theirs.fileno())],
            env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),), start_new_session=True,
        )
        theirs.close()
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._spawned: list[int] = []
        self._exits: dict[int, int] = {}
        self._alive = True
        first = self._read_line(timeout=300)
        if first is None or not json.loads(first).get("ready"):
            self.close()
            raise RuntimeError("the zygote did not start")
        threading.Thread(target=self._reader, daemon=True).start()

    def _read_line(self, timeout: float) -> bytes | None:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                return None
            chunk = self._sock.recv(1)
            if not chunk:
                return None
            data += chunk
        return data

    def _reader(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._changed:
                    self._alive = False
                    self._changed.notify_all()
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                with self._changed:
                    if "pid" in message:
                        self._spawned.append(message["pid"])
                    else:
                        self._exits[message["exit"]] = message["status"]
                    self._changed.notify_all()

    @property
    def alive(self) -> bool:
        return self._alive and self._process.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, fds: dict[int, int]) -> ZygoteProcess:
        """Fork a test process running ``argv`` (argv[0] is the script) with ``fds`` {child fd: our fd}."""
        targets = list(fds)
        request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "fds": targets}).encode() + b"\n"
        with self._lock:
            socket.send_fds(self._sock, [request], [fds[target] for target in targets])
            with self._changed:
                if not self._changed.wait_for(lambda: self._spawned or not self._alive, timeout=60):
                    raise RuntimeError("the zygote did not answer")
                if not self._spawned:
                    raise RuntimeError("the zygote died")
                return ZygoteProcess(self, self._spawned.pop(0))

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or not self._alive, timeout=timeout)
            return self._exits.pop(pid, None if self._alive else -signal.SIGKILL)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except OSError:
            pass
        self._process.wait()


if __name__ == "__main__":
    kit_root, fd = sys.argv[1], int(sys.argv[2])
    grader_root = str(Path(__file__).resolve().parent.parent)
    sys.path[:0] = [kit_root] if kit_root == grader_root else [kit_root, grader_root]
    serve(fd)
