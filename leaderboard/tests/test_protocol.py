"""The pipe's frames: tensors round-trip exactly, and anything malformed is refused unread."""

import os
import pickle
import struct
import threading
from pathlib import Path

import pytest
import torch

from confine.frames import HEADER
from leaderboard.protocol import MemoryChannel, ProtocolError, decode, encode, read_message


def wrapped(body: bytes) -> bytes:
    """``body`` as one frame on the pipe (confine/frames.py: its length, then the bytes)."""
    return HEADER.pack(len(body)) + body


def stream_of(data: bytes) -> int:
    """The read end of a pipe that carries ``data`` and then closes, as the worker's does when it exits."""
    read_fd, write_fd = os.pipe()

    def feed():
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os.close(write_fd)

    threading.Thread(target=feed, daemon=True).start()
    return read_fd


def test_tensors_and_fields_round_trip_exactly():
    sent = {"O": torch.randn(2, 5, 3).to(torch.bfloat16), "dQ": torch.randn(2, 5, 3)[:, ::2], "empty": torch.empty(0, 4, dtype=torch.float16)}
    stream = stream_of(wrapped(encode("gate", sent, label="x", times_ms=[1.5, 2.0])) + wrapped(encode("done")))
    first = read_message(stream)
    assert first.type == "gate" and first.header["label"] == "x" and first.header["times_ms"] == [1.5, 2.0]
    for name, tensor in sent.items():
        assert first.tensors[name].dtype == tensor.dtype and torch.equal(first.tensors[name], tensor)
    assert read_message(stream).type == "done"
    assert read_message(stream) is None  # a clean end between frames


def frame(header: bytes, payload: bytes = b"") -> bytes:
    return wrapped(struct.pack(">I", len(header)) + header + payload)


class Planted:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/leaderboard-unpickled"),))


@pytest.mark.parametrize(
    "data, why",
    [
        (wrapped(encode("done"))[:-3], "ended in the middle"),
        (wrapped(encode("done"))[:5], "ended in the middle"),
        (frame(b"not json"), "not JSON"),
        (frame(b"[1, 2]"), "string 'type'"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "object", "shape": [1]}]}', b"x" * 8), "dtypes allowed"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [4]}]}', b"x" * 8), "needs 16 bytes"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [1]}]}', b"x" * 8), "no tensor claims"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [-1]}]}'), "has shape"),
        (wrapped(struct.pack(">I", 1 << 31)), "over the limits"),
        (wrapped(struct.pack(">I", 9) + b"{}"), "9-byte header in a 6-byte frame"),
        (wrapped(b"{}"), "no header length"),
        (HEADER.pack(1 << 40), "more than this request can return"),  # refused before it is read
    ],
)
def test_malformed_frames_are_refused(data, why):
    with pytest.raises(ProtocolError, match=why):
        read_message(stream_of(data))


def test_a_pickle_in_the_payload_is_only_bytes():
    marker = Path("/tmp/leaderboard-unpickled")
    marker.unlink(missing_ok=True)
    payload = pickle.dumps(Planted())
    payload += b"\0" * (len(payload) % 2)
    header = b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float16", "shape": [%d]}]}' % (len(payload) // 2)
    assert decode(header, payload).tensors["O"].dtype == torch.float16  # the pickle's bytes, as numbers
    with pytest.raises(ProtocolError, match="no tensor claims"):
        decode(header, payload + b"\x80\x04")
    assert not marker.exists()


def test_memory_channel_checks_like_a_pipe():
    channel = MemoryChannel()
    channel.send("fresh", {"O": torch.ones(1, 2)}, label="fresh_1", batch=0)
    (message,) = channel.messages
    assert message.type == "fresh" and message.received > 0 and torch.equal(message.tensors["O"], torch.ones(1, 2))
    with pytest.raises(ValueError, match="int64"):
        channel.send("gate", {"O": torch.ones(2, dtype=torch.int64)})
