"""A test is charged the same whether it runs alone or after the rest of its file.

Read by staff changing what the grader's watchdog charges a test (autograder/watchdog.py's
``Budget`` over every process under the harness, harness/cpu_clock.py) or when the
executor and the replay process start (harness/client.py ``ready``, autograder/pytest_plugin.py).
Issue 39: a hidden test passed alone but failed its limit in a full grade. On a CPU (2026-12-05,
2 cores, load 3-5) the correct base's Triton backward fuzz test was charged 9.3 s of CPU first in
its process and 4.6 s after another Triton test: the first test of a process paid the rest of the
executor's start-up and the replay process's whole start-up (importing torch and triton). Both now
start before the test's charge begins.

One Triton test of the correct base is graded alone, then after the tests before it in its file
that run kernels, in one chain (``--jobs 1``); its charged CPU seconds come from ``grade --timeline``.
What may still differ is warm-up that belongs to the submission's own kernels (the interpreter's
first run of each kernel; on a GPU, compiling it), bounded here by ``FACTOR`` and ``SLACK_S``.
Runs on a CPU only (about 60 s: two grades): on a GPU the first call of each kernel compiles it,
a warm-up of the submission's own that no change to the grader removes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from fixtures.mutants import BASE_DIR
from harness import gpus

FILE = "tests/test_flash_forward_triton.py"
MEASURED = f"{FILE}::test_flash_forward_triton_every_autotune_config[causal]"
BEFORE = [f"{FILE}::{name}" for name in (
    "test_flash_forward_triton_cs336_shape[full]", "test_flash_forward_triton_cs336_shape[causal]",
    "test_flash_forward_triton_any_shape", "test_flash_forward_triton_beyond_float16_range",
    "test_flash_forward_triton_every_autotune_config[full]")]
FACTOR = 1.3
SLACK_S = 1.0


def _charged(tests: list[str], out: Path) -> dict[str, float]:
    """{node id: charged CPU seconds} of a grade of the base on ``tests``, one chain, in file order."""
    timeline = out.with_suffix(".timeline")
    grade(GradeOptions(submission=BASE_DIR, out=out, tests=tests, jobs=1, timeline=timeline, quiet=True))
    results = json.loads((out / "results.json").read_text())
    failed = [test["name"] for test in results["tests"] if test.get("status") == "failed"]
    assert not failed, f"the correct base failed {failed}: its times say nothing"
    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    order = [event["nodeid"] for event in events if event.get("event") == "start"]
    assert order[-1] == MEASURED, f"{MEASURED} must run last in its chain; the order was {order}"
    return {event["nodeid"]: float(event["cpu"]) for event in events if event.get("event") == "end"}


@pytest.mark.skipif(gpus.count() > 0, reason="on a GPU the first call compiles the kernels: a warm-up of the submission's own")
def test_a_test_is_charged_the_same_alone_and_after_the_rest_of_its_file(tmp_path):
    tmp_path.chmod(0o755)  # the executor's own user reads the grade's folders
    alone = _charged([MEASURED], tmp_path / "alone")[MEASURED]
    after = _charged(BEFORE + [MEASURED], tmp_path / "after")[MEASURED]
    bound = FACTOR * after + SLACK_S
    assert alone <= bound, (
        f"{MEASURED} was charged {alone:.2f} s alone but {after:.2f} s after the rest of its file (bound "
        f"{FACTOR} x {after:.2f} + {SLACK_S} = {bound:.2f} s): a test run first in its process pays start-ups "
        "(the executor's, the replay process's) that later tests do not"
    )
    assert after <= FACTOR * alone + SLACK_S, f"{MEASURED}: {after:.2f} s after the rest of its file, {alone:.2f} s alone"
