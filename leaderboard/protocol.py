"""The pipe between the worker and the parent: framed JSON messages, tensors as raw bytes.

Staff read this file to know exactly what crosses from the process that runs student code to
the process that writes the record, and why reading it is safe. The worker writes frames to a
pipe; the parent reads them, stamps each with its own clock on arrival, and never executes or
unpickles anything it reads:

    frame   = one frame of ``confine/frames.py`` (the one length-prefixed reader and writer,
              shared with the grader's executor), whose body is
              header length (4 bytes, big-endian) + header (UTF-8 JSON object with a string
              "type") + payload
    tensors = header["tensors"]: [{"name", "dtype", "shape"}, ...]; the payload is their raw
              little-endian bytes, concatenated in that order

The frame reader refuses a frame over ``MAX_FRAME_BYTES`` from its length alone. Decoding
checks every length, dtype and shape against the payload before building a tensor
(``torch.frombuffer`` on a copy of the bytes). Anything malformed raises ``ProtocolError``;
the parent refuses the run. What the messages mean, and in which order they must come, is the
parent's business (``verdict``).
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field

import torch

from confine.frames import Closed, ProtocolError, Truncated, read_frame, write_frame

__all__ = ["MemoryChannel", "Message", "PipeChannel", "ProtocolError", "decode", "decode_frame", "encode", "read_message"]
_HEAD = struct.Struct(">I")
MAX_HEADER_BYTES = 64 << 20  # a timing list of a million floats fits
MAX_PAYLOAD_BYTES = 1 << 30  # O, dQ, dK, dV at the leaderboard shape are 128 MiB
MAX_FRAME_BYTES = _HEAD.size + MAX_HEADER_BYTES + MAX_PAYLOAD_BYTES
MAX_TENSOR_DIMS = 4
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass
class Message:
    """One decoded frame: its header fields, its tensors, and when the reader received it
    (``time.perf_counter()`` of the reading process, in seconds)."""

    header: dict
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    received: float = 0.0

    @property
    def type(self) -> str:
        return self.header["type"]


def encode(kind: str, tensors: dict[str, torch.Tensor] | None = None, **fields) -> bytes:
    """One frame's body: a header ``{"type": kind, **fields}`` plus ``tensors`` (copied to the CPU)."""
    header = {"type": kind, **fields}
    chunks = []
    if tensors:
        header["tensors"] = []
        for name, tensor in tensors.items():
            dtype = str(tensor.dtype).removeprefix("torch.")
            if dtype not in DTYPES:
                raise ValueError(f"cannot send a {dtype} tensor; allowed: {sorted(DTYPES)}")
            flat = tensor.detach().to("cpu").contiguous().reshape(-1)
            header["tensors"].append({"name": name, "dtype": dtype, "shape": list(tensor.shape)})
            chunks.append(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    head = json.dumps(header, allow_nan=False).encode()
    payload = b"".join(chunks)
    return _HEAD.pack(len(head)) + head + payload


def read_message(fd: int) -> Message | None:
    """The next frame on ``fd``, stamped when it has fully arrived; None at a clean end of the
    stream (between frames).

    Raises ``ProtocolError`` for a truncated, oversized or malformed frame.
    """
    try:
        body = read_frame(fd, limit=MAX_FRAME_BYTES)
    except Truncated:
        raise ProtocolError("the stream ended in the middle of a frame") from None
    except Closed:
        return None
    return decode_frame(body, time.perf_counter())


def decode_frame(body: bytes | bytearray, received: float = 0.0) -> Message:
    """Split a frame's body into header and payload and decode them (``ProtocolError`` if bad)."""
    if len(body) < _HEAD.size:
        raise ProtocolError(f"a frame of {len(body)} bytes has no header length")
    (head_size,) = _HEAD.unpack_from(body)
    payload_size = len(body) - _HEAD.size - head_size
    if head_size > MAX_HEADER_BYTES or payload_size > MAX_PAYLOAD_BYTES:
        raise ProtocolError(f"a frame announced {head_size} header and {payload_size} payload bytes (over the limits)")
    if payload_size < 0:
        raise ProtocolError(f"a frame announced a {head_size}-byte header in a {len(body)}-byte frame")
    view = memoryview(body)
    return decode(bytes(view[_HEAD.size : _HEAD.size + head_size]), view[_HEAD.size + head_size :], received)


def decode(head: bytes, payload: bytes, received: float = 0.0) -> Message:
    """Build a Message from a header and payload, checking both (``ProtocolError`` if bad)."""
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ProtocolError(f"a header is not JSON: {str(error)[:200]}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("a header is not a JSON object with a string 'type'")
    specs = header.pop("tensors", [])
    if not isinstance(specs, list):
        raise ProtocolError("'tensors' is not a list")
    tensors: dict[str, torch.Tensor] = {}
    offset = 0
    for spec in specs:
        name, dtype, shape = _check_spec(spec)
        if name in tensors:
            raise ProtocolError(f"tensor {name!r} is sent twice")
        size = DTYPES[dtype].itemsize
        for extent in shape:
            size *= extent
        if offset + size > len(payload):
            raise ProtocolError(f"tensor {name!r} needs {size} bytes; the payload has {len(payload) - offset} left")
        if size == 0:
            tensors[name] = torch.empty(shape, dtype=DTYPES[dtype])
        else:
            tensors[name] = torch.frombuffer(bytearray(payload[offset : offset + size]), dtype=DTYPES[dtype]).reshape(shape)
        offset += size
    if offset != len(payload):
        raise ProtocolError(f"the payload has {len(payload) - offset} bytes that no tensor claims")
    return Message(header, tensors, received)


def _check_spec(spec) -> tuple[str, str, list[int]]:
    if not isinstance(spec, dict):
        raise ProtocolError("a tensor description is not an object")
    name, dtype, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
    if not isinstance(name, str) or dtype not in DTYPES:
        raise ProtocolError(f"a tensor description has name {name!r} and dtype {dtype!r}; dtypes allowed: {sorted(DTYPES)}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_TENSOR_DIMS
        or not all(type(n) is int and 0 <= n <= MAX_PAYLOAD_BYTES for n in shape)
    ):
        raise ProtocolError(f"tensor {name!r} has shape {shape!r}")
    return name, dtype, shape


class PipeChannel:
    """The worker's end: writes frames to a file descriptor (the pipe the parent reads)."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, kind: str, tensors: dict[str, torch.Tensor] | None = None, **fields) -> None:
        write_frame(self.fd, encode(kind, tensors, **fields))


class MemoryChannel:
    """A channel that decodes each frame as it is sent and keeps the messages, stamped when
    sent: the same checks as a pipe, for running the worker's steps inside one process."""

    def __init__(self):
        self.messages: list[Message] = []

    def send(self, kind: str, tensors: dict[str, torch.Tensor] | None = None, **fields) -> None:
        self.messages.append(decode_frame(encode(kind, tensors, **fields), time.perf_counter()))
