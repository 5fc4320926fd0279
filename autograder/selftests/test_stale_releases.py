"""An output of an executor since restarted, collected later, releases nothing of the next executor.

The harness tells the executor which of its handles and graphs it dropped (``harness/client.py``:
each returned object's finalizer notes its number, sent with the next request). Numbers start
again in each process, and the executor is restarted after every test in which Triton raised;
a finalizer that ran after the restart noted the old process's number for the new one, which
then released its own graph of that number, and a later test's backward failed with "KeyError:
7" raised in the submission's process: seen in full grades of a real submission, on a test that
passed alone, in a different test from one grade to the next. The notes now carry the process's
generation, and only the current process's are sent.
"""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest


def _submission(root: Path) -> Path:
    (root / "cs336_systems").mkdir(parents=True)
    (root / "cs336_systems" / "__init__.py").write_text("")
    (root / "adapters.py").write_text(textwrap.dedent('''
        def double(x):
            return x * 2


        class Box:
            def value(self):
                return 5


        def box():
            return Box()
    '''))
    return root


@pytest.fixture
def executor(tmp_path):
    from harness.client import Executor
    from harness.process import ExecutorSettings

    tmp_path.chmod(0o755)  # the executor's own user reads its folders
    executor = Executor(ExecutorSettings(submission=_submission(tmp_path / "submission"), workdir=tmp_path / "work",
                                         test_timeout_s=120.0))
    try:
        executor.begin_test()
        yield executor
    finally:
        executor.stop()


def test_an_earlier_processs_graph_and_handle_collected_late_release_nothing_of_the_next(executor):
    import torch

    from harness.proxies import RemoteAdapters

    adapters = RemoteAdapters(executor)
    old_output = adapters.double(torch.ones(3, requires_grad=True))  # graph 2 of the first process
    old_box = adapters.box()  # a handle of the first process
    executor.stop()  # what end_test does after a test in which Triton raised
    executor.begin_test()
    x = torch.ones(3, requires_grad=True)
    output = adapters.double(x)  # graph 2 of the second process: the same number
    box = adapters.box()
    del old_output, old_box
    gc.collect()  # the first process's objects die only now, during the next test
    assert torch.autograd.grad(output.sum(), x)[0].tolist() == [2.0, 2.0, 2.0]
    assert box.value() == 5
