"""The replay's tolerances are the tests' own: they scale with V (a correct kernel on |V| near 1e5
passes), and a saved L is recognised within the tests' allowance for L (a tf32 forward's L).

Read by staff changing how the grader judges a Triton call's outputs against its replay
(harness/replay.py ``value_scale``, ``Replays.found``; harness/triton_credit.py
``_wrong_output``). Before, the correct base (fixtures/mutants/base) failed the hidden
``test_flash_backward_hidden_beyond_float16[triton]`` in every grade on a CPU, though the test's
own check passed: float32 rounding at |V| near 1e5 moved near-zero elements of dQ by up to 0.1,
and the replay held them to an unscaled atol of 0.01.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from autograder.grade import GradeOptions, grade
from fixtures.mutants import BASE_DIR
from harness.replay import Call, match, match_tolerance, value_scale

BEYOND_FLOAT16 = "autograder/hidden_tests/test_flash_backward_hidden.py::test_flash_backward_hidden_beyond_float16[triton]"


def test_the_scale_is_the_size_of_V_for_what_grows_with_it():
    V = torch.randn(1, 90, 32, generator=torch.Generator().manual_seed(0))
    call = Call(known={"V": V * 1e5}, outputs={}, d=32)
    assert 0.9e5 < value_scale(call, "dQ") < 1.1e5 and value_scale(call, "O") == value_scale(call, "dK")
    assert value_scale(call, "dV") == 1.0 and value_scale(call, "L") == 1.0, "dV and L do not grow with V"
    assert value_scale(Call(known={"V": V}, outputs={}, d=32), "dQ") == 1.0, "standard normal V: unchanged"
    assert value_scale(Call(known={}, outputs={}, d=32), "dQ") == 1.0


def _graded(submission, nodeid: str, tmp_path) -> list[dict]:
    """results.json's tests for a grade of ``submission`` on the one test ``nodeid``."""
    tmp_path.chmod(0o755)  # the executor's own user reads the grade's folders
    grade(GradeOptions(submission=submission, out=tmp_path / "out", tests=[nodeid], quiet=True))
    return json.loads((tmp_path / "out" / "results.json").read_text())["tests"]


def _base_with(tmp_path, edit) -> Path:
    """A copy of the correct base whose Triton file is ``edit(its text)``."""
    submission = tmp_path / "submission"
    shutil.copytree(BASE_DIR, submission, ignore=shutil.ignore_patterns("__pycache__"))
    kernel = submission / "cs336_systems" / "flash_attention_triton.py"
    kernel.write_text(edit(kernel.read_text()))
    return submission


def test_the_correct_base_passes_the_large_V_backward_through_the_grader(tmp_path):
    tests = _graded(BASE_DIR, BEYOND_FLOAT16, tmp_path)
    assert [test["status"] for test in tests] == ["passed"], tests


# -- the saved L of a correct forward with tf32 dots --------------------------------------------------

CAUSAL_BACKWARD = "tests/test_flash_backward.py::test_flash_backward_cs336_shape[triton-causal]"
LSE_LINE = "    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back to natural log\n"
TF32_SIZED_ERROR = "    lse += 2e-3 * tl.sin(q_offs.to(tl.float32))  # a tf32 forward's error, within the tests' 1e-2\n"


def _saved_L(rows: int, seed: int) -> torch.Tensor:
    return torch.randn(1, rows, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.05


def test_an_L_off_by_a_tf32_error_is_still_the_harness_s_L():
    """A view within the tests' own L tolerance is recognised as L, even one row of one key whose L
    is near 0 (alpha strays far there); the inputs keep the cast's tolerance, and an L off by more
    than the tests allow stays unknown (checked on many rows: one value near 0 is some handout
    factor of any small value, and the replay then starts from that multiple of the harness's L)."""
    for rows in (1, 2, 300):
        truth = _saved_L(rows, rows)
        off = (truth + 3e-3 * torch.sign(torch.randn(truth.shape, dtype=torch.float64))).to(torch.float32)
        found = match(off, Call(known={"L": truth}, outputs={}, d=16))
        assert found is not None and found[0] == "L", (rows, found)
    too_far = (truth + 5e-2 * torch.sign(torch.randn(truth.shape, dtype=torch.float64))).to(torch.float32)
    assert match(too_far, Call(known={"L": truth}, outputs={}, d=16)) is None, "beyond the tests' 1e-2: unknown"
    Q = torch.randn(1, 64, 16, generator=torch.Generator().manual_seed(1))
    assert match(Q + 3e-3, Call(known={"Q": Q}, outputs={}, d=16)) is None, "an input keeps the cast's tolerance"
    assert match_tolerance("L", torch.float32) > match_tolerance("Q", torch.float32)


def test_a_forward_whose_L_has_a_tf32_error_keeps_its_causal_backward_credit(tmp_path):
    """The correct base with an error of tf32's size in its saved L (a GPU's tf32 dots, made here
    on the CPU) passes the causal Triton backward: before, its L started as NaN in the replay, and
    the base lost every causal backward test on an H100. End to end, its L is matched exactly to
    its forward's replayed L; the tolerance alone is pinned by the test above."""
    def add_error(source: str) -> str:
        assert source.count(LSE_LINE) == 1, "the base's forward changed: update LSE_LINE"
        return source.replace(LSE_LINE, LSE_LINE + TF32_SIZED_ERROR)

    tests = _graded(_base_with(tmp_path, add_error), CAUSAL_BACKWARD, tmp_path)
    assert [test["status"] for test in tests] == ["passed"], [test["output"][:600] for test in tests]


# -- large logits: a tf32 forward's L belongs with its own scores ---------------------------------------

LARGE_LOGITS_BACKWARD = "autograder/hidden_tests/test_flash_backward_hidden.py::test_flash_backward_hidden_large_logits[triton]"
TF32_HELPER = '''@triton.jit
def _tf32(x):
    """x rounded to tf32 (10 mantissa bits), as a GPU's float32 tl.dot reads it."""
    return (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)


'''


def test_a_tf32_kernel_keeps_its_large_logits_backward_credit(tmp_path):
    """The correct base with its scores' dots rounded to tf32 in both kernels (a GPU's float32
    tl.dot, made here on the CPU) passes the hidden large-logits backward. At scores near 150 its
    L is off from the float64 one by about 0.07; the replay gave its backward the float64 L, its
    replayed dK differed by 20% and it earned nothing (on an H100 too, 2026-12-06). Now the
    backward may be given the L its forward's replay computed."""
    def round_scores_to_tf32(source: str) -> str:
        assert source.count("tl.dot(q, tl.trans(k))") == 2, "the base's score products changed: update this test"
        source = source.replace("tl.dot(q, tl.trans(k))", "tl.dot(_tf32(q), tl.trans(_tf32(k)))")
        first = source.index("@triton.jit")
        return source[:first] + TF32_HELPER + source[first:]

    tests = _graded(_base_with(tmp_path, round_scores_to_tf32), LARGE_LOGITS_BACKWARD, tmp_path)
    assert [test["status"] for test in tests] == ["passed"], [test["output"][:600] for test in tests]
