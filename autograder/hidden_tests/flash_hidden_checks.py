"""Shared pieces of the hidden FlashAttention-2 tests: secret seeds and the checks beyond accuracy.

Staff only (never shipped). Read by autograder/hidden_tests/test_flash_*_hidden.py.

Seeds: every hidden case draws its inputs from ``hidden_seed(label)``, a hash of the case's
label and the course's secret (autograder/hidden_tests/secret.py: ``$CS336_HIDDEN_SEED`` when
set, a new one each term, else a fixed constant that never leaves this directory). Students see the visible
tests' seeds, never these.

The checks here go beyond "is O close to the truth":
``check_saved_tensors`` (L is the only (batch, n_queries) tensor, float32; nothing of
n_queries x n_keys elements is saved), ``check_repeat_call`` (a second call with the same
inputs gives the same O and does not touch the first call's result), ``check_compiled``
(``torch.compile(Function.apply)`` matches the truth, forward and backward),
``check_large_logits`` (scores near +-150 overflow exp() unless the running max is
subtracted, and underflow the sum to 0 unless it starts at -inf) and ``check_sum_backward``
(``o.sum().backward()`` hands the backward a dO with all-zero strides).
"""

from __future__ import annotations

import hashlib
import warnings

import torch

from autograder.hidden_tests.secret import course_secret
from harness import gpus
from harness.assertions import assert_close, assert_meta, place_rerun
from harness.flash_cases import (
    FlashCase,
    compile_apply,
    explain_device_refusal,
    reporting,
    saved_logsumexp,
    saved_tensors,
)
from harness.flash_reference import attention_float64
from harness.flash_tolerances import tolerance

DEVICE = "cuda" if gpus.count() else "cpu"
# On a GPU, torch.compile's default backend (inductor), as the leaderboard uses it. On a CPU,
# "aot_eager": the same graph capture (dynamo) and autograd tracing, which is where a Function
# breaks under compile, without inductor's C++ build (20+ s per graph on a 2-core machine).
COMPILE_BACKEND = "inductor" if gpus.count() else "aot_eager"


def hidden_seed(label: str) -> int:
    """A 31-bit seed for the case ``label``, unpredictable without the secret."""
    secret = course_secret()
    digest = hashlib.sha256(f"{secret}/{label}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def hidden_case(label: str, **fields) -> FlashCase:
    """A FlashCase whose seed comes from ``label`` and the secret (device: CUDA when present)."""
    fields.setdefault("device", DEVICE)
    return FlashCase(seed=hidden_seed(label), **fields)


def case_id(case: FlashCase) -> str:
    """A short test id: '17x100-d32-float16-causal-sliced'."""
    dtype = str(case.dtype).removeprefix("torch.")
    return f"{case.batch}x{case.n_queries}x{case.n_keys}-d{case.d}-{dtype}-{'causal' if case.is_causal else 'full'}-{case.layout}"


def check_saved_tensors(function: type[torch.autograd.Function], case: FlashCase, implementation: str) -> None:
    """L is the only saved (batch, n_queries) tensor, is float32, and no saved tensor holds
    n_queries * n_keys elements or more (no scores, probabilities or masks are kept).

    Pick the case with batch * d < min(n_queries, n_keys), so that Q, K, V and O (batch * n * d
    elements) stay below that bound.
    """
    context = case.repro(function.__name__, implementation)
    Q, K, V = case.make_inputs(requires_grad=True)
    with reporting(case, implementation, "forward", f"{function.__name__}.apply"):
        O = function.apply(Q, K, V, case.is_causal)
    L = saved_logsumexp(O, case.batch, case.n_queries, context)
    assert_meta(L, shape=(case.batch, case.n_queries), dtype=torch.float32, what="saved logsumexp L", context=context)
    truth = case.truth(Q, K, V)  # the right shapes earn nothing unless the values are right too
    assert_close(O, truth.O, **tolerance(case.dtype, "O", implementation).elementwise(), what="O", context=context)
    assert_close(L, truth.L, **tolerance(case.dtype, "L", implementation).elementwise(), what="saved logsumexp L", context=context)
    limit = case.n_queries * case.n_keys
    if case.batch * case.d >= min(case.n_queries, case.n_keys):
        raise ValueError(f"pick a case with batch * d < min(n_queries, n_keys); got {case}")
    for tensor in saved_tensors(O, context):
        if tensor.numel() >= limit:
            raise AssertionError(place_rerun(
                f"the forward saved a tensor of shape {tuple(tensor.shape)} ({tensor.numel()} elements, at "
                f"least n_queries * n_keys = {limit}) [{context}]. FlashAttention-2 saves only L, Q, K, V "
                "and O; the backward recomputes scores, probabilities and masks tile by tile."
            ))


def check_repeat_call(function: type[torch.autograd.Function], case: FlashCase, implementation: str) -> None:
    """f(A) twice gives equal O and L, and a call on other inputs in between leaves f(A)'s result alone."""
    context = case.repro(function.__name__, implementation)
    Q, K, V = case.make_inputs(requires_grad=True)
    with reporting(case, implementation, "forward", f"{function.__name__}.apply"):
        first = function.apply(Q, K, V, case.is_causal)
    first_L = saved_logsumexp(first, case.batch, case.n_queries, context).clone()
    kept = first.detach().clone()
    other = case.replace(seed=case.seed + 1).make_inputs(requires_grad=True)
    with reporting(case.replace(seed=case.seed + 1), implementation, "forward", f"{function.__name__}.apply"):
        function.apply(*other, case.is_causal)
    if not torch.equal(first.detach(), kept):
        assert_close(first, kept, atol=0.0, rtol=0.0, what="O of the first call, after a second call on other inputs",
                     context=context + ". Return a fresh tensor from every call; never reuse an output buffer")
    with reporting(case, implementation, "forward", f"{function.__name__}.apply (again)"):
        again = function.apply(Q, K, V, case.is_causal)
    assert_close(again, kept, atol=0.0, rtol=0.0, what="O of a repeat call (must equal the first)", context=context)
    again_L = saved_logsumexp(again, case.batch, case.n_queries, context)
    assert_close(again_L, first_L, atol=0.0, rtol=0.0, what="L of a repeat call (must equal the first)", context=context)
    truth = case.truth(Q, K, V)
    assert_close(first, truth.O, **tolerance(case.dtype, "O", implementation).elementwise(), what="O", context=context)


def check_compiled(function: type[torch.autograd.Function], case: FlashCase, implementation: str,
                   backward: bool) -> None:
    """``torch.compile(function.apply)`` gives O (and, if ``backward``, dQ, dK, dV) within tolerance.

    Where the compiled result is wrong, the same Function is run eagerly on the same inputs. If
    that is right, the fault is torch.compile's, not the student's: some correct PyTorch
    Functions (a Python loop over tiles writing O and L into preallocated tensors slice by
    slice, with a dense backward) get gradients off by O(1) under ``torch.compile(Fn.apply)``
    with inductor on a GPU (torch 2.11), while eager mode and the CPU are right. CS336 never
    asks for the PyTorch Function to be compiled, so this check does not deduct for it: it
    passes and warns with the miscompile and the workaround (``torch.compiler.disable`` around
    the tile loops, as reference/cs336_systems/flash_attention_pytorch.py does). The Triton
    Function gets no such allowance (``implementation == "triton"``): the leaderboard runs it
    compiled, so it must work compiled.
    """
    backend = COMPILE_BACKEND
    compiled_call = f"torch.compile({function.__name__}.apply, backend={backend!r})(Q, K, V, {case.is_causal})"
    context = f"{compiled_call} with {case.repro(function.__name__)}"
    compiled = compile_apply(function, backend)
    Q, K, V = case.make_inputs(requires_grad=True)
    dO = case.make_grad_output() if backward else None
    with reporting(case, implementation, "backward" if backward else "forward", compiled_call):
        O = compiled(Q, K, V, case.is_causal)
    assert_meta(O, shape=tuple(Q.shape), dtype=case.dtype, what="O", context=context)
    with torch.no_grad():  # the same Function, uncompiled: for the Triton one, its own kernels must run
        with reporting(case, implementation, "forward", f"{function.__name__}.apply"):
            function.apply(Q.detach(), K.detach(), V.detach(), case.is_causal)
    truth = case.truth(Q, K, V, dO)
    try:
        assert_close(O, truth.O, **tolerance(case.dtype, "O", implementation).elementwise(), what="O", context=context)
        if backward:
            with reporting(case, implementation, "backward", compiled_call + " and its backward"):
                grads = torch.autograd.grad(O, (Q, K, V), dO)
            for name, grad, expected in zip(("dQ", "dK", "dV"), grads, truth[2:]):
                assert_close(grad, expected, **tolerance(case.dtype, name, implementation).elementwise(), what=name,
                             context=context + ", backward")
    except AssertionError as compiled_error:
        if implementation != "pytorch" or not _eager_is_right(function, case, implementation, backward):
            raise
        warnings.warn(
            f"torch.compile miscompiled your PyTorch Function: {compiled_call} gave wrong results where "
            f"{function.__name__}.apply (eager) on the same inputs is right, so no points are taken. "
            "If you need it compiled, wrap the tile loops in a function decorated with @torch.compiler.disable "
            "(as a graph break) and compile only the dense backward. The compiled result:\n"
            f"{compiled_error}",
            stacklevel=2,
        )


def _eager_is_right(function, case: FlashCase, implementation: str, backward: bool) -> bool:
    """Whether ``function.apply`` (not compiled) passes the same comparisons on ``case``."""
    Q, K, V = case.make_inputs(requires_grad=True)
    dO = case.make_grad_output() if backward else None
    try:
        O = function.apply(Q, K, V, case.is_causal)
        truth = case.truth(Q, K, V, dO)
        assert_close(O, truth.O, **tolerance(case.dtype, "O", implementation).elementwise(), what="O")
        if backward:
            grads = torch.autograd.grad(O, (Q, K, V), dO)
            for name, grad, expected in zip(("dQ", "dK", "dV"), grads, truth[2:]):
                assert_close(grad, expected, **tolerance(case.dtype, name, implementation).elementwise(), what=name)
    except Exception:  # noqa: BLE001  eager is wrong too (or crashed): the compiled failure stands
        return False
    return True


class _naming_failures:
    """Re-raise a crash or timeout of the submission's process (ExecutorFailure) with ``context``;
    explain a Triton Function's refusal of CPU tensors as every other test does (handout §2.4)."""

    def __init__(self, context: str, implementation: str = "pytorch", device: str = DEVICE):
        self.context, self.implementation, self.device = context, implementation, device

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        from harness.process import ExecutorFailure

        if isinstance(error, ExecutorFailure):
            raise ExecutorFailure(f"{error}\n  while running {self.context}") from None
        if isinstance(error, Exception):
            explain_device_refusal(error, self.device, self.context.split(" with ", 1)[0],
                                   triton=self.implementation == "triton")
        return False


def large_logit_inputs(batch: int, n: int, d: int, dtype: torch.dtype, seed: int, device: str):
    """Q, K, V whose scores sit near -150 (even rows) or +150 (odd rows), spread by a few units.

    exp(150) overflows float32 and exp(-150) underflows it, so only an online softmax that
    subtracts its running max, started at -inf, gets these rows right.
    """
    generator = torch.Generator().manual_seed(seed)
    sign = torch.where(torch.arange(n) % 2 == 0, -1.0, 1.0)[None, :, None]  # (1, n, 1)
    level = 150.0 / d**0.5  # q.k / sqrt(d) = level * sum(k) / sqrt(d), with sum(k) close to d
    q = sign * level + 0.05 * torch.randn(batch, n, d, generator=generator)  # (batch, n, d)
    k = 1.0 + 0.05 * torch.randn(batch, n, d, generator=generator)  # (batch, n, d)
    v = torch.randn(batch, n, d, generator=generator)
    return tuple(t.to(device=device, dtype=dtype).requires_grad_(True) for t in (q, k, v))


def check_large_logits(function: type[torch.autograd.Function], implementation: str, *, batch: int, n: int, d: int,
                       is_causal: bool, seed: int, device: str, backward: bool) -> None:
    """O (and the gradients) are finite and match the truth for scores near +-150, in float32.

    Tolerances are 10x the float32 ones of ``implementation``: scores this large amplify the
    rounding of Q and K (an error of 150 * 2^-11 in a score with tf32, 150 * 2^-24 in float32),
    while the mistakes this catches give NaN or Inf.
    """
    context = (
        f"{function.__name__}.apply(Q, K, V, {is_causal}) with scores near +-150: Q, K, V = "
        f"large_logit_inputs(batch={batch}, n={n}, d={d}, dtype=torch.float32, seed={seed}, device={device!r}) "
        "(autograder/hidden_tests/flash_hidden_checks.py)"
    )
    Q, K, V = large_logit_inputs(batch, n, d, torch.float32, seed, device)
    with _naming_failures(context, implementation, device):
        O = function.apply(Q, K, V, is_causal)
    dO = torch.randn(O.shape, generator=torch.Generator().manual_seed(seed + 1)).to(device) if backward else None
    truth = attention_float64(Q, K, V, is_causal, dO)
    loose = {key: 10 * value for key, value in tolerance(torch.float32, "O", implementation).elementwise().items()}
    assert_close(O, truth.O, **loose, what="O", context=context)
    if backward:
        with _naming_failures(context + ", backward", implementation, device):
            grads = torch.autograd.grad(O, (Q, K, V), dO)
        for name, grad, expected in zip(("dQ", "dK", "dV"), grads, truth[2:]):
            loose = {key: 10 * value for key, value in tolerance(torch.float32, name, implementation).elementwise().items()}
            assert_close(grad, expected, **loose, what=name, context=context + ", backward")


def check_sum_backward(function: type[torch.autograd.Function], case: FlashCase, implementation: str) -> None:
    """``O.sum().backward()`` (dO all ones with strides (0, 0, 0)) gives the right dQ, dK, dV."""
    context = case.repro(function.__name__) + ", then O.sum().backward() (dO is an expanded tensor of ones)"
    Q, K, V = case.make_inputs(requires_grad=True)
    with reporting(case, implementation, "backward", f"{function.__name__}.apply, then O.sum().backward()"):
        O = function.apply(Q, K, V, case.is_causal)
        grads = torch.autograd.grad(O.sum(), (Q, K, V))
    truth = case.truth(Q, K, V, torch.ones(O.shape, device=O.device, dtype=O.dtype))
    for name, grad, expected in zip(("dQ", "dK", "dV"), grads, truth[2:]):
        assert_close(grad, expected, **tolerance(case.dtype, name, implementation).elementwise(), what=name, context=context)
