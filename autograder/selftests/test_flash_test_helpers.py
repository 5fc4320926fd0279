"""The pieces every FlashAttention-2 test leans on are themselves right.

Staff only. Checks harness/flash_reference.py (the truth of the tests and of the leaderboard's
gate) against PyTorch's own attention, its chunks against one chunk, harness/assertions.py's
verdicts and messages, harness/flash_tolerances.py's tables, and that harness/flash_cases.py's
layouts really are what they claim.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.assertions import assert_close, assert_meta
from harness.flash_cases import LAYOUTS, FlashCase
from harness.flash_reference import attention_float64
from harness.flash_tolerances import GATE_TOLERANCES, IMPLEMENTATIONS, PYTORCH_FLOAT32, QUANTITIES, TOLERANCES, Tolerance, tolerance


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_queries,n_keys", [(37, 37), (19, 50), (50, 19), (1, 9)])
def test_float64_truth_matches_pytorch_attention(n_queries, n_keys, is_causal):
    """SDPA's is_causal is top-left aligned too; -1e6 and -inf agree when no row is fully masked."""
    case = FlashCase(batch=2, n_queries=n_queries, n_keys=n_keys, d=32, dtype=torch.float64, is_causal=is_causal, seed=3)
    Q, K, V = (t.requires_grad_(True) for t in case.make_inputs())
    dO = case.make_grad_output()
    truth = attention_float64(Q, K, V, is_causal, dO)
    O = F.scaled_dot_product_attention(Q, K, V, is_causal=is_causal)
    grads = torch.autograd.grad(O, (Q, K, V), dO)
    scores = Q @ K.transpose(1, 2) / 32**0.5
    if is_causal:
        scores = scores.masked_fill(torch.ones(n_queries, n_keys, dtype=torch.bool).triu(1), float("-inf"))
    for expected, actual in zip((O, torch.logsumexp(scores, -1), *grads), truth):
        torch.testing.assert_close(actual, expected.detach(), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_chunks_of_queries_give_the_one_chunk_truth(is_causal):
    """Five chunks, the last one ragged: the causal mask must follow each chunk's offset, and dK,
    dV must sum over every chunk (the leaderboard's shape takes 32 chunks)."""
    case = FlashCase(batch=2, n_queries=300, n_keys=200, d=32, dtype=torch.bfloat16, is_causal=is_causal,
                     layout="mixed", seed=5)
    Q, K, V = case.make_inputs()
    dO = case.make_grad_output()
    whole = attention_float64(Q, K, V, is_causal, dO, chunk=300)
    chunked = attention_float64(Q, K, V, is_causal, dO, chunk=64)
    for name, a, e in zip(QUANTITIES, chunked, whole):
        assert a.dtype == torch.float64
        assert_close(a, e, atol=1e-12, rtol=1e-12, what=name, context="64-query chunks vs one chunk")
    forward_only = attention_float64(Q, K, V, is_causal, chunk=64)
    assert torch.equal(forward_only.O, chunked.O) and forward_only.dQ is None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_hold_the_same_values(layout):
    plain = FlashCase(batch=2, n_queries=5, n_keys=7, d=16, seed=1)
    laid = plain.replace(layout=layout)
    for a, b in zip(plain.make_inputs(), laid.make_inputs(requires_grad=True)):
        assert torch.equal(a, b.detach())
    Q, K, V = laid.make_inputs()
    if layout != "contiguous":
        assert not (Q.is_contiguous() and K.is_contiguous() and V.is_contiguous())
    assert torch.equal(plain.make_grad_output(), laid.make_grad_output())


def test_assert_close_passes_equal_and_reports_mismatch():
    expected = torch.zeros(2, 3, 4)
    assert_close(expected.clone(), expected, atol=0.0, rtol=0.0)
    actual = expected.clone()
    actual[1, 2, 3] = 0.5
    actual[0, 1, 0] = 0.25
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected, atol=0.1, rtol=0.1, what="O", context="case X")
    message = str(info.value)
    assert "O mismatch [case X]" in message
    assert "max abs error 0.5 at index (1, 2, 3)" in message
    assert "2 of 24 elements" in message and "first at index (0, 1, 0)" in message


def test_assert_close_fails_on_nan_even_where_expected_is_nan():
    expected = torch.tensor([1.0, float("nan")])
    with pytest.raises(AssertionError, match="non-finite values in actual: 1"):
        assert_close(expected.clone(), expected, atol=1.0, rtol=1.0)


def test_assert_meta_names_shape_and_dtype():
    with pytest.raises(AssertionError, match=r"shape \(2, 3\), expected \(2, 4\); dtype torch.float16"):
        assert_meta(torch.zeros(2, 3, dtype=torch.float16), shape=(2, 4), dtype=torch.float32, what="L")


def test_every_dtype_and_quantity_has_a_tolerance():
    for implementation in IMPLEMENTATIONS:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for quantity in QUANTITIES:
                tol = tolerance(dtype, quantity, implementation)
                assert 0 < tol.atol <= 0.1 and 0 <= tol.rtol <= 0.1 and tol.max_frac == 0
                assert (tol.norm is None) == (quantity == "L")  # every quantity but L has a norm bound
    assert set(TOLERANCES) == set(GATE_TOLERANCES) == {torch.float32, torch.float16, torch.bfloat16}


def test_the_pytorch_function_in_float32_gets_no_tf32_allowance():
    """float32 arithmetic errs by ~1e-6 (harness/flash_tolerances.py); a float16 accumulator by ~1e-3."""
    for quantity in QUANTITIES:
        pytorch = tolerance(torch.float32, quantity, "pytorch")
        assert pytorch == PYTORCH_FLOAT32[quantity]
        assert pytorch.atol <= 1e-4 and pytorch.rtol <= 1e-4
        assert tolerance(torch.float32, quantity, "triton").atol >= 10 * pytorch.atol
    for dtype in (torch.float16, torch.bfloat16):
        assert tolerance(dtype, "O", "pytorch") == tolerance(dtype, "O", "triton")


def test_assert_close_cannot_take_a_bound_relative_to_the_maximum():
    """The leaderboard's tolerances bound elements by a fraction of the tensor's maximum, a term the
    tests' assert_close lacks: asking for its keywords must fail, not drop the term."""
    assert Tolerance(1e-3, 2e-3, norm=1e-2).elementwise() == {"atol": 1e-3, "rtol": 2e-3}
    with pytest.raises(ValueError, match="maximum"):
        GATE_TOLERANCES[torch.bfloat16]["O"].elementwise()


def test_a_rerun_command_rebuilds_the_case():
    case = FlashCase(batch=2, n_queries=17, n_keys=5, d=16, dtype=torch.float16, is_causal=True, layout="sliced",
                     seed=3, q_scale=0.1, v_scale=1e5)
    command = case.command("triton", "backward")
    assert command.startswith("TRITON_INTERPRET=1 .venv/bin/python -m tests.checks.flash_repro triton backward \"FlashCase(")
    expression = command.split('"')[1]
    assert eval(expression, {"FlashCase": FlashCase, "torch": torch}) == case  # noqa: S307
    assert not case.replace(device="cuda").command("pytorch").startswith("TRITON_INTERPRET")
