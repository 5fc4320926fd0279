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

- the opening: the grader holds a third file from before its chains start until every marked
  test of the first chains' suites has a verdict (``Opening``), and no unmarked test starts
  meanwhile. Each chain runs its marked tests first (autograder/pytest_plugin.py), so they run
  while nothing else does, before any long test has started; waiting for the running tests to
  end once a marked test asks had cost every chain of a GPU grade of the reference 9-11 s.

The lock is three files in the grade's private folder, which no process of the submission can
open, and flock(2) frees a dead process's hold. The harness takes it before it reports the
test's start, so the wait is never charged to a test's time limit; it tells the watchdog it is
waiting (autograder/watchdog.py), and waits at most ``WAIT_LIMIT_S``. Only a test elsewhere that
runs that long (a hang, until its own limit) makes a test go ahead without the lock, and the
harness prints that on the test process's output.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ENV_VAR = "CS336_GPU_QUIET_LOCK"  # the lock's folder, set for the harness processes of a GPU grade
MARKER = "alone_on_gpu"
OPENING = "opening"  # the file of the grader's hold at the start of a grade (``Opening``)
OPENING_LIMIT_S = 90.0  # the longest the opening lasts (a GPU grade's chains start in about 15 s)
WAIT_LIMIT_S = 600.0  # the longest a test waits for the lock (a test's wall-clock backstop is 480 s)
_POLL_S = 0.02


class GpuQuiet:
    """The lock of one grade's GPU, for one harness process (``folder``: where its two files live)."""

    def __init__(self, folder: Path):
        folder.mkdir(mode=0o700, exist_ok=True)
        self._gate = os.open(folder / "gate", os.O_RDWR | os.O_CREAT, 0o600)  # writers first
        self._main = os.open(folder / "main", os.O_RDWR | os.O_CREAT, 0o600)  # shared by tests, one alone
        self._opening = os.open(folder / OPENING, os.O_RDWR | os.O_CREAT, 0o600)  # the grader's, at first

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

        if not alone and take(self._opening, fcntl.LOCK_SH):  # after the grade's opening (``Opening``)
            fcntl.flock(self._opening, fcntl.LOCK_UN)
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


class Opening:
    """The grader's hold on the start of a GPU grade: from its creation (before any chain starts)
    until every test marked ``alone_on_gpu`` in ``suites`` has a verdict, no unmarked test of the
    grade starts. The watchdogs report what they learn: each suite's marked tests when a chain of
    it has collected (``collected``), each verdict (``settled``), each chain that ended
    (``chain_ended``: a suite none of whose chains collected has nothing left to wait for). Give
    ``suites`` only the suites of chains that start at once: a chain queued behind the others
    cannot collect before they end. ``release`` ends the opening early (the grader calls it when
    its chains are done, whatever happened), and is safe to call twice.

    A marked test that comes later (a restarted chain's, or a queued suite's) still gets the GPU
    to itself through the writers-first lock, only after the running tests end. So the opening
    may end at any time without a test sharing the GPU with a marked one; it ends by itself after
    ``limit_s``, so that a marked test that never runs first (a chain stuck before it) cannot keep
    the grade waiting."""

    def __init__(self, folder: Path, suites: set[str], limit_s: float = OPENING_LIMIT_S):
        folder.mkdir(mode=0o700, exist_ok=True)
        self._fd: int | None = os.open(folder / OPENING, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._uncollected = set(suites)
        self._unsettled: set[str] = set()
        self._settled: set[str] = set()
        self._lock = threading.Lock()
        self._timer = threading.Timer(limit_s, self.release)
        self._timer.daemon = True
        self._timer.start()
        self._check()

    def collected(self, suite: str, alone: list[str]) -> None:
        """A chain of ``suite`` collected; ``alone`` are its tests marked ``alone_on_gpu``."""
        with self._lock:
            if suite in self._uncollected:
                self._uncollected.discard(suite)
                self._unsettled.update(set(alone) - self._settled)
            self._check()

    def settled(self, nodeid: str) -> None:
        with self._lock:
            self._settled.add(nodeid)
            self._unsettled.discard(nodeid)
            self._check()

    def chain_ended(self, suite: str) -> None:
        with self._lock:
            self._uncollected.discard(suite)
            self._check()

    @property
    def open(self) -> bool:
        """True while unmarked tests are still kept waiting."""
        return self._fd is not None

    def release(self) -> None:
        with self._lock:
            self._release()

    def _check(self) -> None:
        if not self._uncollected and not self._unsettled:
            self._release()

    def _release(self) -> None:
        self._timer.cancel()
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)  # not only a close: a forked child may share the descriptor
            os.close(self._fd)
            self._fd = None


def from_environment() -> GpuQuiet | None:
    """The grade's lock if this harness process was given one (``$CS336_GPU_QUIET_LOCK``), else None."""
    folder = os.environ.get(ENV_VAR)
    return GpuQuiet(Path(folder)) if folder else None
