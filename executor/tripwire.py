"""Audit hooks that refuse the submission's introspection of the executor (PEP 578).

Installed by ``server.py`` before the submission is imported; Python offers no way to remove
an audit hook once added. A hook sees each audited event with the Python frame that caused
it, and refuses (``PermissionError``, naming the rule and the submission's file:line) the
events below when the submission's own code asks for them directly, or through one helper of
``inspect`` or ``traceback``:

- walking the garbage collector's objects: ``gc.get_objects``, ``gc.get_referrers``,
  ``gc.get_referents`` (``gc.collect`` stays allowed);
- taking frames: ``sys._getframe`` (also ``inspect.currentframe``/``inspect.stack``),
  ``sys._current_frames``, a traceback's ``tb_frame`` and a generator's or coroutine's frame;
- tracing: ``sys.settrace``, ``sys.setprofile``;
- ``ctypes`` (raw memory and foreign calls);
- from any code in the executor, a Python socket's ``connect`` or ``sendto`` to an address that is
  not loopback (the executor's network namespace already has no other; this holds where a
  container refuses it one).

The handout (§2.4) names these rules. Library code (torch, triton, logging, the standard
library on its own behalf) keeps every one of them. This is a tripwire, not the boundary: no
verdict depends on what runs in the executor staying unforged (the grader's threat model says why); it turns
the routes the kit has seen used into a clear refusal.
"""

from __future__ import annotations

import os
import sys
import threading

_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_HELPERS = ("inspect.py", "traceback.py")  # standard-library helpers that take frames for their caller
RULES = {
    "gc": "walking the garbage collector's objects (gc.get_objects, get_referrers, get_referents)",
    "frames": "reading stack frames (sys._getframe, inspect.currentframe/stack, tb_frame, gi_frame)",
    "trace": "installing a trace or profile function (sys.settrace, sys.setprofile)",
    "ctypes": "using ctypes",
    "network": "connecting to an address outside this machine's loopback",
}


def _off_machine(address) -> bool:
    if not (isinstance(address, tuple) and address and isinstance(address[0], str)):
        return False  # a Unix socket or an unknown family
    host = address[0].strip("[]").lower()
    return not (host.startswith("127.") or host in ("::1", "localhost", "0.0.0.0", "::", ""))


def _rule(event: str, args: tuple) -> str | None:
    if event in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
        return "gc"
    if event in ("sys._getframe", "sys._current_frames"):
        return "frames"
    if event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRIBUTES:
        return "frames"
    if event in ("sys.settrace", "sys.setprofile"):
        return "trace"
    if event.startswith("ctypes."):
        return "ctypes"
    return None


def install(submission: str) -> None:
    """Add the hook for the submission copied at ``submission`` (call before importing it)."""
    root = os.path.join(os.path.realpath(submission), "")
    guard = threading.local()
    getframe = sys._getframe

    def hook(event: str, args: tuple) -> None:
        if event in ("socket.connect", "socket.sendto") and len(args) > 1 and _off_machine(args[1]):
            raise PermissionError(f"{RULES['network']} ({args[1]!r}) is not allowed while grading")
        rule = _rule(event, args)
        if rule is None or getattr(guard, "busy", False):
            return
        guard.busy = True
        try:
            frame = getframe(1)  # the Python code that caused the event
            if frame is not None and os.path.basename(frame.f_code.co_filename) in _HELPERS:
                frame = frame.f_back  # one step through inspect or traceback
                while frame is not None and os.path.basename(frame.f_code.co_filename) in _HELPERS:
                    frame = frame.f_back
            if frame is None or not os.path.realpath(frame.f_code.co_filename).startswith(root):
                return
            where = f"{os.path.relpath(os.path.realpath(frame.f_code.co_filename), root)}:{frame.f_lineno}"
        finally:
            guard.busy = False
        raise PermissionError(
            f"{where}: {RULES[rule]} is not allowed in a submission ({event}). The grader refuses it so that "
            "code under test cannot reach the grader's instruments (handout §2.4, 'How the grader knows your kernels do the work'). "
            "Remove it; gc.collect() and ordinary exceptions stay allowed.")

    sys.addaudithook(hook)
