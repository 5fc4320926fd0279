"""The float64 reference (chunked over queries) and the comparison that gates every submission."""

import math

import pytest
import torch

from leaderboard.config import TOLERANCES
from leaderboard.gate import compare, compare_all, reference_attention


def naive_attention(q, k, v, is_causal):
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # (batch, n_queries, n_keys)
    if is_causal:
        n_q, n_k = scores.shape[-2:]
        visible = torch.arange(n_q)[:, None] >= torch.arange(n_k)[None, :]
        scores = scores + torch.where(visible, 0.0, -1e6).double()
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("is_causal", [True, False])
def test_chunked_reference_equals_full_attention(is_causal):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 24, generator=gen, dtype=torch.float64, requires_grad=True) for n in (37, 53, 53))
    do = torch.randn(2, 37, 24, generator=gen, dtype=torch.float64)
    ref = reference_attention(q.float(), k.float(), v.float(), do, is_causal, chunk=8)  # five chunks, ragged last
    o = naive_attention(q, k, v, is_causal)
    o.backward(do)
    for name, want in (("O", o), ("dQ", q.grad), ("dK", k.grad), ("dV", v.grad)):
        assert ref[name].dtype == torch.float64
        torch.testing.assert_close(ref[name], want.detach(), rtol=1e-6, atol=1e-6, msg=name)


def test_bf16_rounding_passes_and_real_bugs_fail():
    gen = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(2, 64, 16, generator=gen) for _ in range(4))
    want = reference_attention(q, k, v, do, True)
    tol = TOLERANCES[torch.bfloat16]
    rounded = {name: t.to(torch.bfloat16) for name, t in want.items()}
    assert all(c.problem is None for c in compare_all(rounded, want, tol))

    wrong_scale = reference_attention(q * 1.25, k, v, do, True)["O"]
    assert "relative L2 error" in compare("O", wrong_scale, want["O"], tol["O"]).problem

    big = torch.randn(4, 4096, 16, generator=gen, dtype=torch.float64)  # norm ~ 512
    one_bad = big.clone()
    one_bad[1, 40, 3] += 1.0  # the average hides it (relative L2 ~ 0.002), the max does not
    result = compare("O", one_bad, big, tol["O"])
    assert result.rel_l2 < tol["O"].rel_l2 and "(1, 40, 3)" in result.problem

    nan = want["dK"].clone()
    nan[0, 0, 0] = float("nan")
    assert "non-finite" in compare("dK", nan, want["dK"], tol["dK"]).problem
    assert "shape" in compare("dV", want["dV"][:, :10], want["dV"], tol["dV"]).problem
