"""A traceback from the submission's process, as the student who reads it should see it.

Read by the executor (``server.py``) and the probes whose processes run student code
(``probes/``: the parallel ranks, the benchmarking and memory-profiling calls), which send the
traceback of what the submission raised back to the harness; it ends up in the student's
failure message. There it shows the student's own frames, not the executor's plumbing, and no
path of the grading machine.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path

# This package and confine's copy beside it (in the executor's runtime folder, or in the kit when the
# harness runs a probe itself): plumbing that a student's traceback leaves out.
_RUNTIME = (str(Path(__file__).resolve().parent) + os.sep, str(Path(__file__).resolve().parent.parent / "confine") + os.sep)


def _forms(folder: str) -> set[str]:
    """``folder`` as a path may name it: as given (made absolute) and with links resolved."""
    return {os.path.abspath(folder), str(Path(folder).resolve())}


def _library_folders() -> list[str]:
    """The folders Python and its packages are installed in (site-packages, the standard library)."""
    folders = {sysconfig.get_path(name) for name in ("purelib", "platlib", "stdlib", "platstdlib")}
    folders.update(getattr(site, "getsitepackages", lambda: [])())
    return [form + os.sep for folder in folders if folder for form in _forms(folder)]


def _submission_folder() -> str | None:
    """The folder of the submission's ``adapters`` module, once it is imported in this process."""
    adapters = sys.modules.get("adapters")
    file = getattr(adapters, "__file__", None)
    return os.path.dirname(file) if isinstance(file, str) else None


def student_traceback(error: BaseException, submission: str | None = None) -> str:
    """``error``'s traceback as its student reads it: this process's plumbing frames left out
    (``_RUNTIME``), and no path of the grading machine: files of the submission relative to it
    (``cs336_systems/flash_attention_pytorch.py``), files of Python and its packages relative to
    their folder (``torch/autograd/function.py``). ``submission``: the submission's folder (default:
    the folder its imported ``adapters`` came from). Chained exceptions keep their own tracebacks."""
    report = traceback.TracebackException(type(error), error, error.__traceback__)
    seen, pending = set(), [report]
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list(
            [frame for frame in part.stack if not str(frame.filename).startswith(_RUNTIME)])
        pending += [chained for chained in (part.__cause__, part.__context__) if chained is not None]
    text = "".join(report.format())
    submission = submission or _submission_folder()
    prefixes = [form + os.sep for form in _forms(submission)] if submission else []
    for prefix in sorted({*prefixes, *_library_folders()}, key=len, reverse=True):
        text = text.replace(prefix, "")
    return text
