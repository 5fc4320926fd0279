"""Which Python runs the kit: a one-line refusal instead of a traceback from the wrong one.

Read by whoever starts a kit command. Every entry point (``python -m autograder``, ``-m
leaderboard``, ``-m leaderboard.training_step``, ``-m fixtures``, ``-m tests.score`` and the staff
tools) calls ``require_kit_stack`` before it imports anything else of the kit; the batches call
``stack_missing`` on the interpreter their jobs will use before they queue a job. A Python that
cannot import the kit's stack (``STACK``: the machine's ``/usr/bin/python3`` in a fresh shell,
say) gets one line on stderr naming the interpreter to use, ``.venv/bin/python`` (what
``bash setup.sh`` makes), and exit status 2.

This module imports nothing outside the standard library, and its syntax is Python 3.7's, so
that any Python can run it far enough to say so.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

KIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STACK = ("torch", "numpy", "pytest", "hypothesis")  # what every kit command imports, directly or through the tests
EXIT_WRONG_PYTHON = 2


def kit_python(kit: str = KIT) -> str:
    """The interpreter a kit command should run under: the kit's ``.venv/bin/python``."""
    return os.path.join(kit, ".venv", "bin", "python")


def missing_here(stack=STACK) -> list:
    """The packages of ``stack`` that this interpreter cannot find (none when it is the kit's)."""
    missing = []
    for name in stack:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def wrong_python_line(command: str, python: str, missing, rerun: str = "", kit: str = KIT) -> str:
    """The one line that refuses ``command`` under ``python``, which lacks ``missing``; it names the
    kit's interpreter, followed by ``rerun`` (``-m autograder``: what to run with it)."""
    use = kit_python(kit)
    how = "" if os.path.exists(use) else f" (run `bash setup.sh` in {kit} first: it makes .venv)"
    return (f"{command}: this Python ({python}) cannot import {', '.join(missing)}, which the kit needs; run it "
            f"with the kit's interpreter instead: {use}{' ' + rerun if rerun else ''}{how}")


def require_kit_stack(command: str) -> None:
    """Exit at once (status 2, one line on stderr naming the interpreter to use) unless this Python
    can import the kit's stack. ``command`` is how the user started it: ``python -m autograder``."""
    missing = missing_here()
    if missing:
        rerun = command.split(" ", 1)[1] if command.startswith("python ") else ""
        sys.stderr.write(wrong_python_line(command, sys.executable, missing, rerun) + "\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_WRONG_PYTHON)


def stack_missing(python: str, cwd: str = KIT, timeout_s: float = 60.0) -> list:
    """The packages of STACK that the interpreter ``python`` cannot find, asked in a process of
    its own (as a batch's jobs will start it); ``["python"]`` when it does not start at all."""
    probe = ("import importlib.util as u, sys; "
             f"sys.stdout.write(','.join(m for m in {STACK!r} if u.find_spec(m) is None))")
    try:
        completed = subprocess.run([python, "-c", probe], cwd=cwd, capture_output=True, text=True,
                                   timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ["python"]
    if completed.returncode != 0:
        return ["python"]
    return [name for name in completed.stdout.strip().split(",") if name]
