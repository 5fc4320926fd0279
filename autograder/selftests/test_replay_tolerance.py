"""The replay's tolerance scales with V, as the tests' own does: a correct kernel on |V| near 1e5 passes.

Read by staff changing how the grader judges a Triton call's outputs against its replay
(harness/replay.py ``value_scale``, ``Replays.found``; harness/client.py
``_wrong_output``). Before, the correct base (fixtures/mutants/base) failed the hidden
``test_flash_backward_hidden_beyond_float16[triton]`` in every grade on a CPU, though the test's
own check passed: float32 rounding at |V| near 1e5 moved near-zero elements of dQ by up to 0.1,
and the replay held them to an unscaled atol of 0.01.
"""

from __future__ import annotations

import json

import torch

from autograder.grade import GradeOptions, grade
from fixtures.mutants import BASE_DIR
from harness.replay import Call, value_scale

BEYOND_FLOAT16 = "autograder/hidden_tests/test_flash_backward_hidden.py::test_flash_backward_hidden_beyond_float16[triton]"


def test_the_scale_is_the_size_of_V_for_what_grows_with_it():
    V = torch.randn(1, 90, 32, generator=torch.Generator().manual_seed(0))
    call = Call(known={"V": V * 1e5}, outputs={}, d=32)
    assert 0.9e5 < value_scale(call, "dQ") < 1.1e5 and value_scale(call, "O") == value_scale(call, "dK")
    assert value_scale(call, "dV") == 1.0 and value_scale(call, "L") == 1.0, "dV and L do not grow with V"
    assert value_scale(Call(known={"V": V}, outputs={}, d=32), "dQ") == 1.0, "standard normal V: unchanged"
    assert value_scale(Call(known={}, outputs={}, d=32), "dQ") == 1.0


def test_the_correct_base_passes_the_large_V_backward_through_the_grader(tmp_path):
    tmp_path.chmod(0o755)  # the executor's own user reads the grade's folders
    grade(GradeOptions(submission=BASE_DIR, out=tmp_path / "out", tests=[BEYOND_FLOAT16], quiet=True))
    tests = json.loads((tmp_path / "out" / "results.json").read_text())["tests"]
    assert [test["status"] for test in tests] == ["passed"], tests
