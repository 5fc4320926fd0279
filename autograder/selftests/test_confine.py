"""The parts of confine/ that need no root. frames.py, the one frame reader of the executor's and
the leaderboard worker's pipes: a frame comes back whole, an oversized one is refused from its
length alone, a slow one times out, and a pipe that closes says whether it closed between frames
or inside one. limits.py: a limit set cannot be raised again, and a misspelt one is refused.
(What needs root is in test_executor_confinement.py and leaderboard/tests/test_worker_confinement.py.)"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from confine import limits

KIT = Path(__file__).resolve().parents[2]
from confine.frames import HEADER, Closed, ProtocolError, TimedOut, Truncated, read_frame, write_frame


def _pipe_with(data: bytes, close: bool = True) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()

    def feed():
        os.write(write_fd, data)
        if close:
            os.close(write_fd)

    threading.Thread(target=feed, daemon=True).start()
    return read_fd, write_fd


def test_a_frame_round_trips_and_a_close_between_frames_is_closed():
    read_fd, write_fd = os.pipe()
    payload = os.urandom(5 << 20)  # several reads' worth
    writer = threading.Thread(target=lambda: (write_frame(write_fd, payload), write_frame(write_fd, b""), os.close(write_fd)))
    writer.start()
    assert bytes(read_frame(read_fd)) == payload
    assert read_frame(read_fd) == b""
    with pytest.raises(Closed) as closed:
        read_frame(read_fd)
    assert not isinstance(closed.value, Truncated)
    writer.join()
    os.close(read_fd)


@pytest.mark.parametrize("data", [HEADER.pack(10) + b"abc", HEADER.pack(10)[:3]])
def test_a_pipe_closed_inside_a_frame_is_truncated(data):
    read_fd, _ = _pipe_with(data)
    with pytest.raises(Truncated, match="middle of a frame"):
        read_frame(read_fd)
    os.close(read_fd)


def test_an_oversized_frame_is_refused_before_its_payload_is_read():
    read_fd, write_fd = _pipe_with(HEADER.pack(1 << 40), close=False)  # no payload ever follows
    began = time.monotonic()
    with pytest.raises(ProtocolError, match="more than this request can return"):
        read_frame(read_fd, deadline=time.monotonic() + 30, limit=1 << 20)
    assert time.monotonic() - began < 10, "the reader waited for a payload it should have refused"
    os.close(read_fd)
    os.close(write_fd)


def test_a_frame_that_does_not_arrive_in_time_times_out():
    read_fd, write_fd = _pipe_with(HEADER.pack(100) + b"x" * 10, close=False)
    with pytest.raises(TimedOut, match="10 of 100 bytes"):
        read_frame(read_fd, deadline=time.monotonic() + 0.5)
    os.close(read_fd)
    os.close(write_fd)


def test_a_limit_set_cannot_be_raised_again():
    code = ("import os, resource; from confine import limits; limits.apply({'fsize_bytes': 1 << 20, 'cpu_s': None})\n"
            "if os.geteuid() == 0:\n    os.setuid(65534)  # root could raise it: the executor and the worker are not root\n"
            "try:\n    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 21, 1 << 21))\nexcept ValueError:\n    print('held')\n"
            "print(resource.getrlimit(resource.RLIMIT_FSIZE), resource.getrlimit(resource.RLIMIT_CPU)[0] == resource.RLIM_INFINITY)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=KIT)
    assert done.stdout.split("\n")[:2] == ["held", f"({1 << 20}, {1 << 20}) True"], done.stdout + done.stderr


def test_an_unknown_limit_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown resource limits \\['fsize'\\]; known: .*fsize_bytes"):
        limits.apply({"fsize": 1})
