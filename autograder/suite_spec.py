"""What a suite run is asked to do (``SuiteSpec``) and what it says of each test (``Verdict``).

Read by staff changing how tests are run. ``autograder/watchdog.py`` runs a suite from a
``SuiteSpec``; ``autograder/harness_process.py`` starts each pytest process from it; the grader
(``autograder/grade.py``) and its chains (``autograder/chains.py``) build it. It lives in a
module of its own so that those modules import it, not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autograder.test_pool import Pool

KIT = Path(__file__).resolve().parent.parent
SUITE_DIRS = {"visible": Path("tests"), "hidden": Path("autograder") / "hidden_tests"}  # kit-relative
POOLED = "tests"  # the name of a grade's chains: each may run tests of every suite (autograder/schedule.py)


def suite_of(nodeid: str) -> str:
    """The suite a test (or test file) belongs to, from its kit-relative path: "hidden" or "visible"."""
    return "hidden" if nodeid.startswith(SUITE_DIRS["hidden"].as_posix() + "/") else "visible"


@dataclass
class Verdict:
    """The verdict on one test: status is "passed", "failed" or "not_graded" (needs GPUs this runner lacks)."""

    nodeid: str
    status: str
    message: str = ""
    text: str = ""
    duration: float = 0.0
    gpu: bool = False


@dataclass
class SuiteSpec:
    """What to run: a suite's test files, and how."""

    name: str
    files: list[Path]
    submission: Path
    workdir: Path
    private_dir: Path
    problem_of: Callable[[str], str]
    test_timeout_s: float
    deadline: float
    crash_streak_limit: int = 3
    restart_limit: int = 25
    keyword: str | None = None
    select: list[str] | None = None
    pool: Pool | None = None  # this chain's share of its suite's tests (autograder/test_pool.py); None: all
    executor_uids: bool = False  # each test process's executor runs as its own leased uid (needs root)
    executor_limits: dict[str, int | None] = field(default_factory=dict)
    threads: int = 1
    on_result: Callable[[str, Verdict], None] = lambda suite, outcome: None
    on_note: Callable[[str, str], None] = lambda suite, note: None
    on_collected: Callable[[str, list[str]], None] = lambda suite, alone: None  # suite, its alone_on_gpu tests
    kit: Path = KIT
    shard: int = 0
    zygote: object | None = None  # an autograder.zygote.Zygote to fork test processes from, or None
    gpu_lock: Path | None = None  # the grade's GPU lock folder (autograder/gpu_quiet.py); None on a CPU
    timeline: Path | None = None  # a file for each test's times (``timeline_line``), or None
    replay_uid: int | None = None  # the grade's one replay user (None: each test process leases its own)
    replay_cache: Path | None = None  # the Triton cache the grade's replays share (owned by ``replay_uid``)
