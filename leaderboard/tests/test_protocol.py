"""The pipe's frames: tensors round-trip exactly, and anything malformed is refused unread."""

import io
import pickle
import struct
from pathlib import Path

import pytest
import torch

from leaderboard.protocol import MemoryChannel, ProtocolError, decode, encode, read_message


def test_tensors_and_fields_round_trip_exactly():
    sent = {"O": torch.randn(2, 5, 3).to(torch.bfloat16), "dQ": torch.randn(2, 5, 3)[:, ::2], "empty": torch.empty(0, 4, dtype=torch.float16)}
    stream = io.BytesIO(encode("gate", sent, label="x", times_ms=[1.5, 2.0]) + encode("done"))
    first = read_message(stream)
    assert first.type == "gate" and first.header["label"] == "x" and first.header["times_ms"] == [1.5, 2.0]
    for name, tensor in sent.items():
        assert first.tensors[name].dtype == tensor.dtype and torch.equal(first.tensors[name], tensor)
    assert read_message(stream).type == "done"
    assert read_message(stream) is None  # a clean end between frames


def frame(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">IQ", len(header), len(payload)) + header + payload


class Planted:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/leaderboard-unpickled"),))


@pytest.mark.parametrize(
    "data, why",
    [
        (encode("done")[:-3], "ended in the middle"),
        (frame(b"not json"), "not JSON"),
        (frame(b"[1, 2]"), "string 'type'"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "object", "shape": [1]}]}', b"x" * 8), "dtypes allowed"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [4]}]}', b"x" * 8), "needs 16 bytes"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [1]}]}', b"x" * 8), "no tensor claims"),
        (frame(b'{"type": "gate", "tensors": [{"name": "O", "dtype": "float32", "shape": [-1]}]}'), "has shape"),
        (struct.pack(">IQ", 1 << 31, 0), "over the limits"),
    ],
)
def test_malformed_frames_are_refused(data, why):
    with pytest.raises(ProtocolError, match=why):
        read_message(io.BytesIO(data))


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
