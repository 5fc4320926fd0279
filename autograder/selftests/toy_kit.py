"""A tiny kit (two problems, a handful of trivial tests) to test the grader's machinery fast.

Read by the grader's selftests. The real suites take minutes and change as the assignment
grows; the watchdog, the crash recovery, the executor's isolation and the points arithmetic are
checked here on tests that take milliseconds, against a submission whose functions crash,
hang, exit, patch pytest or forge results on purpose. The toy kit reuses the real
``conftest.py``, ``harness/`` and ``executor/``, so the submission runs in an
executor exactly as in a real grade.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from autograder.manifest import load_manifest

KIT = Path(__file__).resolve().parents[2]

MANIFEST = """
[grading]
test_timeout_s = 4
crash_streak_limit = 3

[problems.alpha]
section = "§1"
points = 4

[problems.beta]
section = "§2"
points = 6

[problems.gamma]
section = "§3"
points = 2
"""

VISIBLE_ALPHA = '''
import pytest

def test_add(adapters):
    assert adapters.add(2, 3) == 5

def test_segfault(adapters):
    assert adapters.segfault() == 1

def test_hang(adapters):
    assert adapters.hang() == 1

def test_skip(adapters):
    assert adapters.skip_me() == 1

def test_patch_pytest(adapters):
    assert adapters.patch_pytest() == 1

def test_forge_records(adapters):
    assert adapters.forge_records() == 1

def test_still_graded(adapters):
    assert adapters.add(2, 2) == 4

def test_pytest_exit(adapters):
    assert adapters.pytest_exit() == 1

def test_leaves_a_daemon(adapters):
    assert adapters.leave_a_daemon() == 1

def test_hog_memory(adapters):
    assert adapters.hog_memory() == 1

def test_cannot_read_other_copies(adapters):
    found, readable = adapters.read_other_copies()
    assert found and not readable, (found, readable)

@pytest.mark.gpu
def test_needs_gpu(adapters):
    assert adapters.add(1, 1) == 2
'''

HIDDEN_GAMMA = '''
def test_gamma_one(adapters):
    assert adapters.gamma() == 1

def test_gamma_two(adapters):
    assert adapters.gamma() == 1

def test_gamma_three(adapters):
    assert adapters.gamma() == 1

def test_gamma_four(adapters):
    assert adapters.gamma() == 1
'''

HIDDEN_BETA = '''
SECRET = "hidden-beta-expected-value-1234"

def test_secret(adapters):
    assert adapters.add(10, 5) == 15

def test_os_exit(adapters):
    assert adapters.os_exit() == 1

def test_read_hidden(adapters):
    assert adapters.read_hidden() == 1

def test_after_exit(adapters):
    assert adapters.add(0, 0) == 0
'''

SUBMISSION = '''
"""A toy submission that misbehaves in every way the grader must survive."""
import os
import time


def add(a, b):
    return a + b


def segfault():
    import ctypes
    ctypes.string_at(0)


def hang():
    while True:
        time.sleep(0.05)


def patch_pytest():
    import _pytest.python
    _pytest.python.Function.runtest = lambda self: None
    return 0


def forge_records():
    line = b'{"type":"result","nodeid":"tests/test_alpha.py::test_add","outcome":"passed"}\\tbad\\n'
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
    os._exit(0)


def skip_me():
    import pytest
    pytest.skip("a submission may not skip tests")


def pytest_exit():
    import pytest
    pytest.exit("a submission may not end the session")


def os_exit():
    os._exit(0)


def read_other_copies():
    """Every adapters.py under the grader's temp folders but our own copy: (found, readable)."""
    import glob
    mine = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found, readable = [], []
    for root in glob.glob("/tmp/cs336-grade-shared-*"):
        for guess in ("submission/adapters.py", "work/*/submission/adapters.py"):
            for path in glob.glob(os.path.join(root, guess)) + [os.path.join(root, guess)]:
                if "*" in path or os.path.realpath(path).startswith(mine + os.sep):
                    continue
                found.append(path)
                try:
                    open(path).read()
                    readable.append(path)
                except OSError:
                    pass
    return found, readable


def hog_memory():
    return len(bytearray(1 << 40))  # 1 TiB: past any address-space limit the grader sets, and any machine


def leave_a_daemon():
    if os.fork() == 0:  # a child that outlives the test process, holding its pipes open
        os.setsid()
        time.sleep(600)
        os._exit(0)
    return 1


def read_hidden():
    found = []
    for root in (__KIT_ROOT__, os.path.dirname(os.path.dirname(__file__))):
        for dirpath, _, names in os.walk(root):
            for name in names:
                if name.startswith("test_beta"):
                    path = os.path.join(dirpath, name)
                    try:
                        found.append(open(path).read())
                    except OSError as error:
                        found.append(f"unreadable: {error}")
    raise AssertionError("read: " + " | ".join(found))


def gamma():
    os._exit(3)
'''


def build_toy_kit(root: Path) -> tuple[Path, Path, object]:
    """Write the toy kit and its misbehaving submission under ``root``; return (kit, submission, manifest)."""
    kit = root / "kit"
    (kit / "tests").mkdir(parents=True)
    (kit / "autograder" / "hidden_tests").mkdir(parents=True)
    shutil.copy(KIT / "conftest.py", kit / "conftest.py")
    # what the root conftest imports: how the tests run, and the executor
    for folder in ("harness", "executor"):
        shutil.copytree(KIT / folder, kit / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (kit / "tests" / "__init__.py").write_text("")
    (kit / "tests" / "test_alpha.py").write_text(textwrap.dedent(VISIBLE_ALPHA))
    (kit / "autograder" / "hidden_tests" / "test_gamma_hidden.py").write_text(textwrap.dedent(HIDDEN_GAMMA))
    (kit / "autograder" / "hidden_tests" / "test_beta_hidden.py").write_text(textwrap.dedent(HIDDEN_BETA))
    (kit / "manifest.toml").write_text(MANIFEST)
    submission = root / "submission"
    (submission / "cs336_systems").mkdir(parents=True)
    (submission / "cs336_systems" / "__init__.py").write_text("")
    (submission / "adapters.py").write_text(SUBMISSION.replace("__KIT_ROOT__", repr(str(kit))))
    return kit, submission, load_manifest(kit / "manifest.toml")
