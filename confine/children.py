"""Ending and describing a child process: one way for every process that starts one running student code.

Read by the code that starts such processes (``harness/process.py`` among them). Each
starts its child in a session of its own, so that ``kill_group`` ends the child and everything
it started; ``describe_signal`` names how a child died for a message a student or TA reads.
"""

from __future__ import annotations

import os
import signal

SIGNAL_HINTS = {"SIGSEGV": "a segmentation fault", "SIGKILL": "killed, often for using too much memory",
                "SIGABRT": "aborted", "SIGBUS": "a bus error", "SIGFPE": "an arithmetic error"}


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads; nothing if it is gone or not ours to signal."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def describe_signal(status: int) -> tuple[str, str]:
    """(the signal's name, what it usually means) for a negative exit status ``-signal``."""
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return name, SIGNAL_HINTS.get(name, name)
