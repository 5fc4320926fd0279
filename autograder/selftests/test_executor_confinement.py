"""What an executor can reach: the network, the host's ports and shared folders (root only).

Each test runs a fixture of fixtures/attacks in a real executor under a leased user
id, as the grader does, and checks from outside that it reached nothing: a listener this test
starts on the host's loopback receives no byte, the host can still bind the rendezvous port the
executor holds, and no file of the executor's user is left once its lease ends. Each also runs
the same fixture without confinement first, to show the check can fail. Network traffic goes
only to the listener started here, on 127.0.0.1.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
import torch

from confine import uid_pool
from confine.views import why_unreadable
from fixtures import materialize
from fixtures.attacks import get
from harness.client import Executor
from harness.process import ExecutorSettings

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="executors get their own user ids only when graded as root")


class Listener:
    """A TCP listener on the host's 127.0.0.1 that keeps whatever it receives."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.done.is_set():
            try:
                connection, _ = self.sock.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    while chunk := connection.recv(4096):
                        self.received += chunk
                except OSError:
                    pass

    def close(self):
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


def _executor(submission: Path, workdir: Path, lease: uid_pool.UidLease | None) -> Executor:
    why = lease and why_unreadable(lease.uid, lease.gid)
    if why:
        pytest.skip(why)
    return Executor(ExecutorSettings(submission=submission, workdir=workdir, uid=lease.uid if lease else None,
                                     gid=lease.gid if lease else None, test_timeout_s=120))


def _import_submission(executor: Executor) -> None:
    executor.begin_test()
    try:
        executor.call("run_accumulate", None, (0.01, 10), {"accumulator_dtype": torch.float32, "addend_dtype": torch.float32})
    except Exception:  # noqa: BLE001  only the import's side effects matter here
        pass


@pytest.fixture
def tmp_path():
    """A folder an executor's user can traverse (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="cs336-confinement-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def egress_submission(tmp_path):
    listener = Listener()
    submission = materialize(get("network_egress"), tmp_path / "submission")
    (submission / "cs336_systems" / "egress.json").write_text(json.dumps({"port": listener.port}))
    for path in (tmp_path / "submission").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield submission, listener
    listener.close()


def test_unconfined_the_egress_fixture_reaches_the_listener(egress_submission, tmp_path):
    submission, listener = egress_submission
    executor = _executor(submission, tmp_path / "plain", None)
    try:
        _import_submission(executor)
    finally:
        executor.stop()
    listener.done.wait(1.0)
    assert b"hidden test inputs" in listener.received, "the fixture must be able to reach an unconfined listener"


def test_a_confined_executor_reaches_nothing_on_the_host(egress_submission, tmp_path):
    submission, listener = egress_submission
    with uid_pool.leased() as lease:
        executor = _executor(submission, tmp_path / "confined", lease)
        try:
            executor.start()
            _import_submission(executor)
            assert executor.greeting.get("network_confined"), "the executor did not get a network namespace of its own"
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as host:  # the executor holds 29500 in its own namespace
                host.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    host.bind(("127.0.0.1", 29500))
                except OSError as error:
                    pytest.skip(f"127.0.0.1:29500 is in use on this host already ({error})")
        finally:
            executor.stop()
    listener.done.wait(1.0)
    assert listener.received == b"", f"the executor sent {listener.received!r} to the host's loopback"


def _leftovers(uid: int) -> list[str]:
    return [path for folder in ("/run/lock", "/var/lock", "/tmp", "/var/tmp", "/dev/shm")
            for path in glob.glob(os.path.join(folder, f"cs336-leftover-{uid}-*"))]


def test_what_an_executor_leaves_in_shared_folders_never_reaches_the_host(tmp_path):
    """Unconfined, the fixture leaves its files in the host's shared folders (so this test can
    fail); confined, they live in the executor's own tmpfs, and no file of its uid is left."""
    submission = materialize(get("leftover_files"), tmp_path / "submission")
    for path in (tmp_path / "submission").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    plain = _executor(submission, tmp_path / "plain", None)
    try:
        _import_submission(plain)
    finally:
        plain.stop()
    written = _leftovers(os.getuid())
    for path in written:  # /var/lock may be a link to /run/lock: each file is listed twice there
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
    assert written, "unconfined, the fixture must leave files in the host's shared folders"
    lease = uid_pool.lease()
    uid = lease.uid
    try:
        executor = _executor(submission, tmp_path / "confined", lease)
        try:
            _import_submission(executor)
            assert executor.greeting.get("files_confined"), "the executor did not get shared folders of its own"
            assert _leftovers(uid) == [], f"the executor's files reached the host: {_leftovers(uid)}"
        finally:
            executor.stop()
    finally:
        lease.release()
    assert _leftovers(uid) == [], f"files of uid {uid} outlived its lease: {_leftovers(uid)}"


@pytest.fixture
def meeting_submission(tmp_path):
    submission = materialize(get("shared_folders"), tmp_path / "submission")
    for path in (tmp_path / "submission").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield submission
    for path in ("/tmp/cs336-meeting.sock", "/tmp/cs336-meeting", "/var/tmp/cs336-meeting", "/dev/shm/cs336-meeting"):
        if os.path.exists(path):
            os.unlink(path)


def _meet(executor: Executor, action: str):
    executor.begin_test()
    return executor.call("meet_in_shared_folders", None, (action,), {})


def test_two_grades_cannot_meet_through_a_socket_file_or_a_file(meeting_submission, tmp_path):
    first, second = (_executor(meeting_submission, tmp_path / name, None) for name in ("a", "b"))
    try:
        assert _meet(first, "plant") is True
        assert "connected" in _meet(second, "look"), "unconfined, the two executors must meet (else this proves nothing)"
    finally:
        first.stop()
        second.stop()
    for path in ("/tmp/cs336-meeting.sock", "/tmp/cs336-meeting", "/var/tmp/cs336-meeting", "/dev/shm/cs336-meeting"):
        if os.path.exists(path):
            os.unlink(path)
    with uid_pool.leased() as lease_a, uid_pool.leased(1) as lease_b:
        first = _executor(meeting_submission, tmp_path / "ca", lease_a)
        second = _executor(meeting_submission, tmp_path / "cb", lease_b)
        try:
            assert _meet(first, "plant") is True
            assert _meet(second, "look") == [], "a confined executor found another grade's socket or files"
        finally:
            first.stop()
            second.stop()


def test_dev_shm_is_bounded(meeting_submission, tmp_path):
    with uid_pool.leased() as lease:
        executor = _executor(meeting_submission, tmp_path / "fill", lease)
        try:
            written = _meet(executor, "fill")
        finally:
            executor.stop()
    assert written <= (1 << 30) + (64 << 20), f"the executor wrote {written / 2**30:.2f} GiB to /dev/shm"
