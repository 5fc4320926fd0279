"""Signed records from the test process to the grader: what ran, and how it ended.

Read by the grader's side of a test process (autograder/harness_process.py, which verifies) and its pytest plugin (which signs). The test
process gets a fresh secret key per run through a pipe it reads and closes before any student
code is imported, and signs each record with it; the watchdog (autograder/watchdog.py) drops a run whose records are out
of sequence or wrongly signed. A file the student can write, or a line it prints, is never
taken as a result.

A record is one frame of ``confine/frames.py`` (the framing of every channel between a process
and the one that judges it) whose payload is ``<json payload>\\t<hex HMAC-SHA256 of
"<seq>:<json payload>">``: the signature is a thin layer on top of the shared framing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from confine.frames import write_frame

KEY_BYTES = 32
MAX_RECORD_BYTES = 1 << 20  # a record longer than this is refused from its frame header


class ForgedRecord(ValueError):
    """A record whose signature or sequence number is wrong."""


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def _mac(key: bytes, seq: int, payload: str) -> str:
    return hmac.new(key, f"{seq}:{payload}".encode(), hashlib.sha256).hexdigest()


class Signer:
    """Writes signed records, one frame each, to a file descriptor (the test-process side)."""

    def __init__(self, key: bytes, fd: int):
        self._key = key
        self._fd = fd
        self._seq = 0

    def send(self, record: dict) -> None:
        payload = json.dumps(record, separators=(",", ":"), default=str)
        write_frame(self._fd, f"{payload}\t{_mac(self._key, self._seq, payload)}".encode())
        self._seq += 1


class Verifier:
    """Checks records one by one, in order (the grader side)."""

    def __init__(self, key: bytes):
        self._key = key
        self._seq = 0

    def verify(self, frame: bytes) -> dict:
        """Return the record of one frame's payload; raise ForgedRecord if it is not ours."""
        try:
            text = bytes(frame).decode()
            payload, mac = text.rsplit("\t", 1)
        except (UnicodeDecodeError, ValueError) as error:
            raise ForgedRecord(f"unreadable record {bytes(frame[:80])!r}") from error
        if not hmac.compare_digest(mac, _mac(self._key, self._seq, payload)):
            raise ForgedRecord(f"record {self._seq} has a wrong signature")
        self._seq += 1
        try:
            record = json.loads(payload)
        except json.JSONDecodeError as error:
            raise ForgedRecord(f"record {self._seq - 1} is not JSON") from error
        if not isinstance(record, dict) or "type" not in record:
            raise ForgedRecord(f"record {self._seq - 1} has no type")
        return record
