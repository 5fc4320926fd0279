"""The comparison that gates every submission, under the leaderboard's tolerances.

The float64 reference itself (harness/flash_reference.py) is checked by
autograder/selftests/test_flash_test_helpers.py, chunks and all.
"""

import torch

from leaderboard.gate import GATED, compare, compare_all
from harness.flash_reference import attention_float64
from harness.flash_tolerances import GATE_TOLERANCES


def test_bf16_rounding_passes_and_real_bugs_fail():
    gen = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(2, 64, 16, generator=gen) for _ in range(4))
    want = attention_float64(q, k, v, True, do)
    tol = GATE_TOLERANCES[torch.bfloat16]
    rounded = {name: getattr(want, name).to(torch.bfloat16) for name in GATED}
    assert all(c.problem is None for c in compare_all(rounded, want, tol))

    wrong_scale = attention_float64(q * 1.25, k, v, True, do).O
    assert "relative L2 error" in compare("O", wrong_scale, want.O, tol["O"]).problem

    big = torch.randn(4, 4096, 16, generator=gen, dtype=torch.float64)  # norm ~ 512
    one_bad = big.clone()
    one_bad[1, 40, 3] += 1.0  # the average hides it (relative L2 ~ 0.002), the max does not
    result = compare("O", one_bad, big, tol["O"])
    assert result.rel_l2 < tol["O"].norm and "(1, 40, 3)" in result.problem

    nan = want.dK.clone()
    nan[0, 0, 0] = float("nan")
    assert "non-finite" in compare("dK", nan, want.dK, tol["dK"]).problem
    assert "shape" in compare("dV", want.dV[:, :10], want.dV, tol["dV"]).problem


def test_every_term_of_the_tolerance_model_is_applied():
    """The gate applies the whole rule of harness/flash_tolerances.py, not only the terms its own
    tolerances use: atol, rtol and max_frac per element, the norm where set."""
    from harness.flash_tolerances import Tolerance

    want = torch.tensor([[[1.0, 10.0]]], dtype=torch.float64)
    off = lambda a, b: torch.tensor([[[1.0 + a, 10.0 + b]]], dtype=torch.float64)  # noqa: E731
    assert compare("O", off(0.05, 0.0), want, Tolerance(0.1, 0.0)).problem is None
    assert "1 of 2 elements" in compare("O", off(0.2, 0.0), want, Tolerance(0.1, 0.0)).problem
    assert compare("O", off(0.0, 0.9), want, Tolerance(0.0, 0.1)).problem is None  # 0.1 x |10|
    assert "index (0, 0, 1)" in compare("O", off(0.0, 1.1), want, Tolerance(0.0, 0.1)).problem
    assert compare("O", off(0.9, 0.0), want, Tolerance(0.0, 0.0, max_frac=0.1)).problem is None  # 0.1 x max|10|
    assert "0.1 x max|ref|" in compare("O", off(1.1, 0.0), want, Tolerance(0.0, 0.0, max_frac=0.1)).problem
    assert compare("O", off(0.2, 0.0), want, Tolerance(1.0, 0.0, norm=None)).problem is None
    assert "relative L2 error" in compare("O", off(0.2, 0.0), want, Tolerance(1.0, 0.0, norm=1e-2)).problem
