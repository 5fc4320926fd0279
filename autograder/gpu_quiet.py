"""A quiet GPU for the tests whose verdicts compare GPU timings, while the rest of a grade shares it.

Read by staff who change how a grade's test processes share a GPU. A grade runs its test process
chains side by side on one GPU (autograder/chains.py). That leaves every verdict alone except the
few that compare or bound GPU timings (§2.1's sweep: the forward at 4096 tokens slower than at
1024; forward and backward under 100 ms), which other processes' kernels would disturb. Those
tests are marked ``alone_on_gpu``, and the harness process (autograder/pytest_plugin.py) runs
every test of a GPU grade inside this lock:

- a test marked ``alone_on_gpu`` holds it exclusively: while it runs, no other test of the grade
  runs;
- every other test holds it shared, so they run side by side as before;
- writers first: once a marked test asks, no new test starts, so it waits only for the tests
  already running, never for a stream of new ones.

The lock is two files in the grade's private folder, which no process of the submission can
open, and flock(2) frees a dead process's hold. The harness takes it before it reports the
test's start, so the wait is never charged to a test's time limit; it tells the watchdog it is
waiting (autograder/runner.py), and waits at most ``WAIT_LIMIT_S``. Only a test elsewhere that
runs that long (a hang, until its own limit) makes a test go ahead without the lock, and the
harness prints that on the test process's output.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ENV_VAR = "CS336_GPU_QUIET_LOCK"  # the lock's folder, set for the harness processes of a GPU grade
MARKER = "alone_on_gpu"
WAIT_LIMIT_S = 600.0  # the longest a test waits for the lock (a test's wall-clock backstop is 480 s)
_POLL_S = 0.02


class GpuQuiet:
    """The lock of one grade's GPU, for one harness process (``folder``: where its two files live)."""

    def __init__(self, folder: Path):
        folder.mkdir(mode=0o700, exist_ok=True)
        self._gate = os.open(folder / "gate", os.O_RDWR | os.O_CREAT, 0o600)  # writers first
        self._main = os.open(folder / "main", os.O_RDWR | os.O_CREAT, 0o600)  # shared by tests, one alone

    @contextmanager
    def hold(self, alone: bool, on_wait: Callable[[], None] = lambda: None) -> Iterator[bool]:
        """Hold the lock while the block runs: exclusively if ``alone``, else shared. ``on_wait`` is
        called once if the lock is not free at once. Yields whether the lock is held (False only
        after ``WAIT_LIMIT_S`` of waiting)."""
        deadline = time.monotonic() + WAIT_LIMIT_S
        waited = [False]

        def take(fd: int, mode: int) -> bool:
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if not waited[0]:
                        waited[0] = True
                        on_wait()
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(_POLL_S)

        held_gate = take(self._gate, fcntl.LOCK_EX)
        held = held_gate and take(self._main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if held_gate and not alone:
            fcntl.flock(self._gate, fcntl.LOCK_UN)  # a shared holder lets the next one in at once
        if not held:
            print(f"[grader] went ahead after waiting {WAIT_LIMIT_S:.0f} s for the GPU "
                  f"({'alone' if alone else 'shared'}): a test elsewhere in this grade ran that long",
                  file=sys.stderr, flush=True)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(self._main, fcntl.LOCK_UN)
            if held_gate and alone:
                fcntl.flock(self._gate, fcntl.LOCK_UN)


def from_environment() -> GpuQuiet | None:
    """The grade's lock if this harness process was given one (``$CS336_GPU_QUIET_LOCK``), else None."""
    folder = os.environ.get(ENV_VAR)
    return GpuQuiet(Path(folder)) if folder else None
