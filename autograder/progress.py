"""A grade's console progress: one line per finished test file, every test with ``--verbose``.

Read by whoever changes what a grade prints while it runs (autograder/grade.py makes one per
grade and hands its ``result`` to every test process chain). Lines of different chains
interleave; a file's line is printed when its chain starts another file, or at the end.
"""

from __future__ import annotations

import threading
import time

from autograder.redaction import hidden_text, shown_nodeid
from autograder.suite_spec import suite_of
from autograder.watchdog import Verdict


class Progress:
    """Progress lines, one per finished test file, and at once for crashes and restarts."""

    def __init__(self, verbose: bool, quiet: bool):
        self.verbose, self.quiet = verbose, quiet
        self.lock = threading.Lock()
        self.files: dict[tuple[str, str], list[str]] = {}
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if self.quiet:
            return
        with self.lock:
            print(text, flush=True)

    def result(self, chain: str, outcome: Verdict) -> None:
        """``outcome`` came from ``chain``. The suite its lines name, and whether its id is redacted,
        is the test's own, from its path: a chain runs tests of both suites."""
        file = outcome.nodeid.split("::", 1)[0]
        mark = {"passed": ".", "failed": "F", "not_graded": "g"}[outcome.status]
        with self.lock:
            for (other_chain, other_file) in [key for key in self.files if key[0] == chain and key[1] != file]:
                self._flush(other_chain, other_file)
            self.files.setdefault((chain, file), []).append(mark)
            if self.verbose and not self.quiet:
                suite = suite_of(outcome.nodeid)
                shown = shown_nodeid(outcome.nodeid, suite, hidden_text())
                print(f"  [{suite}] {outcome.status:<10} {shown} ({outcome.duration:.1f} s)", flush=True)

    def _flush(self, chain: str, file: str) -> None:
        marks = self.files.pop((chain, file))
        if self.quiet:
            return
        counts = f"{marks.count('.')}/{len(marks)} passed" + (f", {marks.count('g')} need a GPU" if "g" in marks else "")
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {suite_of(file):<7} {file.rsplit('/', 1)[-1]:<44} {''.join(marks)[:40]:<40} {counts}",
              flush=True)

    def flush_all(self) -> None:
        with self.lock:
            for key in list(self.files):
                self._flush(*key)
