"""Length-prefixed frames over a pipe: the one reader and writer for every channel between a
process that runs student code and the process that judges it.

Read by staff who need to know what a hostile sender can make the reader do. The grader's
executor and its harness (``executor/wire.py``: ``torch.save`` values) and the
leaderboard's worker and its parent (a JSON header plus raw tensor bytes) each encode their own
payloads; both move them as frames of this module, and so do the grader's signed test records
(a JSON record and its HMAC per frame). The one channel not framed here is the grader's process
zygote: it passes file descriptors over a Unix socket, which a pipe cannot carry, and no student
code ever writes to it.

    frame = payload length (8 bytes, little-endian) + payload

and its reader defends the reading side:

- a frame larger than the reader's ``limit`` (what the request could legitimately return, at
  most ``MAX_FRAME_BYTES``) is refused from its length alone, before any of it is read;
- with a ``deadline``, a frame that has not fully arrived by then raises ``TimedOut``;
- the payload is read into one buffer of its size, never held twice;
- a pipe that closes between frames raises ``Closed``; one that closes inside a frame raises
  ``Truncated`` (a kind of ``Closed``).

Standard library only; nothing read is executed or unpickled here.
"""

from __future__ import annotations

import os
import select
import struct
import time

HEADER = struct.Struct("<Q")
MAX_FRAME_BYTES = 8 << 30  # a frame larger than this is a protocol error, not a value
_CHUNK = 1 << 22


class ProtocolError(RuntimeError):
    """A frame or payload that breaks its channel's contract (the other side is broken or hostile)."""


class Closed(EOFError):
    """The other side closed its pipe (it exited or died)."""


class Truncated(Closed):
    """The other side closed its pipe in the middle of a frame."""


class TimedOut(TimeoutError):
    """No complete frame arrived before the deadline."""


def write_frame(fd: int, payload: bytes) -> int:
    """Write one frame holding ``payload`` to ``fd`` (all of it); return the payload's size."""
    view = memoryview(HEADER.pack(len(payload)) + payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    return len(payload)


def _read_exactly(fd: int, count: int, deadline: float | None, in_frame: bool) -> bytes | bytearray:
    """``count`` bytes from ``fd``, read into one buffer of that size (nothing is held twice)."""
    buffer = bytearray(count)
    view, done = memoryview(buffer), 0
    while done < count:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimedOut(f"no reply within the time limit ({done} of {count} bytes read)")
        got = os.readv(fd, [view[done:done + _CHUNK]])
        if not got:
            if in_frame or done:
                raise Truncated(f"the other side closed the pipe in the middle of a frame ({done} of {count} bytes read)")
            raise Closed("the other side closed the pipe")
        done += got
    return bytes(buffer) if count <= 64 else buffer


def read_frame(fd: int, deadline: float | None = None, limit: int | None = None) -> bytes | bytearray:
    """The payload of the next frame on ``fd``; raise Closed, Truncated, TimedOut (past
    ``deadline``, a ``time.monotonic()`` value) or ProtocolError.

    ``limit``: the most bytes this frame may hold (what the request could legitimately return);
    a larger frame is refused from its header alone, before any of it is read.
    """
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline, in_frame=False))
    bound = MAX_FRAME_BYTES if limit is None else min(limit, MAX_FRAME_BYTES)
    if size > bound:
        raise ProtocolError(f"a frame of {size} bytes, more than this request can return ({bound} bytes)")
    return _read_exactly(fd, size, deadline, in_frame=True)
