"""The worker is confined by the grader's own layer (confine/): a network of its own with
loopback only, the executor's process and file-size limits, and no file of its uid left
anywhere it could write once the run ends.

Each check runs the parent on a small attack submission that, at import, sends to a listener
this test starts on the host's loopback and leaves a file in every shared folder it can write;
the same submission run unconfined (as root, ``--same-user``) reaches the listener, which
shows the attack works where nothing stops it. Needs root, like every isolated run.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from confine import uid_pool
from leaderboard.parent import run_submission

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops to a leased uid only as root")

SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")
ATTACK = '''"""At import: say its limits, send to the host's loopback, and leave a file in each shared folder."""
import os
import resource
import socket

import torch

from .port import PORT

print("attack: limits", *(resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")), flush=True)
try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as connection:
        connection.sendall(b"the gate's inputs, from the worker\\n")
    print("attack: sent to the host's loopback", flush=True)
except OSError as error:
    print(f"attack: could not connect ({error})", flush=True)
for folder in %r:
    try:
        with open(os.path.join(folder, f"leaderboard-leftover-{os.getuid()}"), "w") as file:
            file.write("left behind")
        print(f"attack: left a file in {folder}", flush=True)
    except OSError:
        pass


class FlashAttentionTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        raise RuntimeError("this submission only attacks")
''' % (SHARED,)
ADAPTERS = '''def get_flashattention_autograd_function_triton():
    from cs336_systems import FlashAttentionTriton
    return FlashAttentionTriton
'''


class Listener:
    """A TCP listener on the host's 127.0.0.1 that keeps what it receives."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.server.settimeout(120)
        try:
            connection, _ = self.server.accept()
            with connection:
                connection.settimeout(5)
                while chunk := connection.recv(1 << 16):
                    self.received += chunk
        except OSError:
            pass

    def close(self):
        self.server.close()


@pytest.fixture
def attack(tmp_path):
    listener = Listener()
    submission = tmp_path / "attack"
    (submission / "cs336_systems").mkdir(parents=True)
    (submission / "adapters.py").write_text(ADAPTERS)
    (submission / "cs336_systems" / "__init__.py").write_text(ATTACK)
    (submission / "cs336_systems" / "port.py").write_text(f"PORT = {listener.port}\n")
    yield submission, listener
    listener.close()
    for folder in SHARED:
        Path(folder, "leaderboard-leftover-0").unlink(missing_ok=True)  # the unconfined run's, as root


def _left_by(uid: int) -> list[str]:
    found = []
    for folder in uid_pool.writable_places():
        try:
            found += [entry.path for entry in os.scandir(folder) if entry.stat(follow_symlinks=False).st_uid == uid]
        except OSError:
            continue
    return found


def test_unconfined_the_attack_reaches_the_hosts_loopback(attack, monkeypatch, capfd):
    import leaderboard.worker_setup

    submission, listener = attack
    monkeypatch.setattr(leaderboard.worker_setup, "is_root", lambda: False)
    record = run_submission(submission, "attack", mode="cpu", same_user=True)
    assert record["isolation"].startswith("none"), record["isolation"]
    assert "attack: sent to the host's loopback" in capfd.readouterr().err
    assert b"the gate's inputs" in listener.received


def test_a_confined_worker_reaches_nothing_on_the_host_and_leaves_no_file(attack, capfd):
    submission, listener = attack
    record = run_submission(submission, "attack", mode="cpu")
    assert record["isolation"].startswith("uid "), record["isolation"]
    uid = int(record["isolation"].split()[1])
    err = capfd.readouterr().err
    assert "attack: could not connect" in err, err[-3000:]
    assert "attack: left a file in /dev/shm" in err, err[-3000:]  # it could write there while it ran
    assert f"attack: limits (1024, 1024) ({2 << 30}, {2 << 30}) (0, 0)" in err, err[-3000:]  # the executor's
    assert listener.received == b"", f"the worker sent {listener.received!r} to the host's loopback"
    assert _left_by(uid) == [], "files the worker's uid left after its lease ended"
    assert not record["accepted"]
