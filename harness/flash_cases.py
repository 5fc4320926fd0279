"""One FlashAttention-2 test case: its inputs, how to rerun it, and the checks every test makes.

Read by the visible tests (tests/test_flash_*.py) and the hidden tests. A ``FlashCase`` is a
frozen description (batch, n_queries, n_keys, d, dtype, is_causal, memory layout, seed); from
it come the inputs, a rerun command that every failure message carries, and the truth. To
rerun a failing case yourself, paste the command its message prints at the repo root, e.g.

    TRITON_INTERPRET=1 .venv/bin/python -m tests.checks.flash_repro triton forward "FlashCase(batch=2, n_queries=17, \
        n_keys=5, d=16, dtype=torch.float16, is_causal=True, layout='sliced', seed=3, device='cpu')"

(``TRITON_INTERPRET=1`` runs Triton kernels on a CPU; a case with ``device='cuda'`` prints no
prefix), which runs the same check and prints the same message (tests/checks/flash_repro.py), from a
fresh shell: it names the kit's ``.venv/bin/python``, and it tests the same submission as the
tests did when ``CS336_SUBMISSION`` is still set (or add ``--submission DIR``). In a
Python shell: ``Q, K, V = FlashCase(...).make_inputs()``, then call your Function.

Checks live here so that every test reports the same way: ``check_forward`` (O, the saved
logsumexp L) and ``check_backward`` (dQ, dK, dV), each compared with harness/flash_reference.py
under the tolerances of harness/flash_tolerances.py for that Function ("pytorch" or "triton").
Whatever goes wrong inside the call (the submission's process crashed or timed out, or a
Triton Function refused CPU tensors) is reported with the case's rerun command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from hypothesis import strategies as st

from harness.assertions import assert_close, assert_meta, assert_norm_close, place_rerun
from harness.flash_reference import AttentionResult, attention_float64
from harness.flash_tolerances import IMPLEMENTATIONS, tolerance

LAYOUTS = ("contiguous", "transposed", "sliced", "mixed")
HEAD_DIMS = (16, 32, 64, 128)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _lay_out(values: torch.Tensor, layout: str) -> torch.Tensor:
    """Return a tensor equal to ``values`` (batch, n, d) stored in the given memory layout.

    contiguous: as is. transposed: a (batch, d, n) tensor viewed as (batch, n, d), so the last
    dimension has stride n. sliced: every other row of a wider tensor, starting 8 elements in,
    so no stride is what a contiguous tensor would have and the data does not start at offset 0.
    """
    batch, n, d = values.shape
    if layout == "contiguous":
        return values.contiguous()
    if layout == "transposed":
        return values.transpose(1, 2).contiguous().transpose(1, 2)  # strides (n*d, 1, n)
    if layout == "sliced":
        wide = torch.zeros(batch, 2 * n, d + 16, dtype=values.dtype, device=values.device)
        view = wide[:, ::2, 8 : 8 + d]  # strides (2n(d+16), 2(d+16), 1), offset 8
        view.copy_(values)
        return view
    raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")


@dataclass(frozen=True)
class FlashCase:
    """One FlashAttention-2 call: shapes, dtype, masking, memory layout and random seed.

    ``layout`` is one of LAYOUTS and applies to Q, K, V and dO ("mixed": Q sliced, K transposed,
    V contiguous, dO transposed). ``q_scale`` multiplies Q: small values flatten the softmax,
    large values sharpen it. ``v_scale`` multiplies V: 1e5 puts V, O and the running
    accumulator past the float16 range (65504), which only a float32 accumulator survives.
    """

    batch: int
    n_queries: int
    n_keys: int
    d: int
    dtype: torch.dtype = torch.float32
    is_causal: bool = False
    layout: str = "contiguous"
    seed: int = 0
    device: str = "cpu"
    q_scale: float = 1.0
    v_scale: float = 1.0

    def replace(self, **changes) -> FlashCase:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def _scales(self) -> str:
        return ("" if self.q_scale == 1.0 else f", q_scale={self.q_scale:g}") + (
            "" if self.v_scale == 1.0 else f", v_scale={self.v_scale:g}")

    def __str__(self) -> str:
        extra = self._scales()
        return (
            f"batch={self.batch}, n_queries={self.n_queries}, n_keys={self.n_keys}, d={self.d}, "
            f"dtype={_dtype_name(self.dtype)}, is_causal={self.is_causal}, layout={self.layout}, "
            f"seed={self.seed}, device={self.device}{extra}"
        )

    def expression(self) -> str:
        """``FlashCase(...)``: Python that rebuilds this case."""
        return (
            f"FlashCase(batch={self.batch}, n_queries={self.n_queries}, n_keys={self.n_keys}, "
            f"d={self.d}, dtype=torch.{_dtype_name(self.dtype)}, is_causal={self.is_causal}, "
            f"layout={self.layout!r}, seed={self.seed}, device={self.device!r}{self._scales()})"
        )

    def command(self, implementation: str, check: str = "forward") -> str:
        """The shell command that reruns this case's ``check`` ("forward" or "backward") of the
        ``implementation`` ("pytorch" or "triton") Function and prints the same message."""
        prefix = "TRITON_INTERPRET=1 " if self.device == "cpu" else ""
        return f'{prefix}.venv/bin/python -m tests.checks.flash_repro {implementation} {check} "{self.expression()}"'

    def repro(self, function_name: str, implementation: str | None = None, check: str = "forward") -> str:
        """What a failure says about the case: the call, the inputs, and (given the
        implementation) the command that reruns it (see ``command``)."""
        text = f"{function_name}.apply(Q, K, V, {self.is_causal}) with Q, K, V = {self.expression()}.make_inputs()"
        if implementation is not None:
            text += f"; rerun: {self.command(implementation, check)}"
        return text

    def _layouts(self) -> tuple[str, str, str, str]:
        if self.layout == "mixed":
            return ("sliced", "transposed", "contiguous", "transposed")
        return (self.layout,) * 4

    def make_inputs(self, requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q (batch, n_queries, d), K and V (batch, n_keys, d): standard normal, in ``dtype``.

        Drawn on the CPU from ``seed`` (so every device sees the same values), then moved to
        ``device`` and laid out as ``layout`` says. With ``requires_grad`` each tensor is a leaf
        that requires grad, or a view of one.
        """
        generator = torch.Generator().manual_seed(self.seed)
        q = torch.randn(self.batch, self.n_queries, self.d, generator=generator) * self.q_scale
        k = torch.randn(self.batch, self.n_keys, self.d, generator=generator)
        v = torch.randn(self.batch, self.n_keys, self.d, generator=generator) * self.v_scale
        tensors = []
        for values, layout in zip((q, k, v), self._layouts()[:3]):
            values = values.to(device=self.device, dtype=self.dtype)
            if requires_grad and layout == "sliced":
                base = _lay_out(values, layout)._base.requires_grad_(True)
                tensors.append(base[:, ::2, 8 : 8 + self.d])
            elif requires_grad and layout == "transposed":
                leaf = values.transpose(1, 2).contiguous().requires_grad_(True)
                tensors.append(leaf.transpose(1, 2))
            else:
                tensors.append(_lay_out(values, layout).requires_grad_(requires_grad))
        return tensors[0], tensors[1], tensors[2]

    def make_grad_output(self) -> torch.Tensor:
        """dO (batch, n_queries, d): standard normal from a seed derived from ``seed``, in ``dtype``."""
        generator = torch.Generator().manual_seed(self.seed + 1_000_003)
        values = torch.randn(self.batch, self.n_queries, self.d, generator=generator)
        return _lay_out(values.to(device=self.device, dtype=self.dtype), self._layouts()[3])

    def truth(self, Q, K, V, dO=None) -> AttentionResult:
        """The reference result for these inputs, in float64 (harness/flash_reference.py)."""
        return attention_float64(Q, K, V, self.is_causal, dO)


def compile_apply(function, backend: str):
    """``torch.compile(function.apply, backend=backend)``, built where ``function`` lives.

    Under ``pytest --isolate`` the Function is in the executor, and so must be the compiled graph:
    the kit's ``compile_apply`` probe builds it there (after ``torch._dynamo.reset()``) and
    returns a handle to it. Otherwise it is compiled here. Calls of the compiled function are
    not checked for the submission's Triton launches (inductor launches kernels its own way);
    callers check the uncompiled Function too.
    """
    from harness.proxies import RemoteObject

    if isinstance(function, RemoteObject):
        return function._executor.probe("flash.compile_apply", function, backend)
    torch._dynamo.reset()
    return torch.compile(function.apply, backend=backend)


def saved_tensors(O: torch.Tensor, context: str) -> tuple[torch.Tensor, ...]:
    """The tensors the forward saved for the backward, read through the autograd graph."""
    if O.grad_fn is None:
        raise AssertionError(place_rerun(
            f"the output O has no grad_fn [{context}]: the inputs required grad, so O must come from "
            "your autograd.Function's apply (do not detach it or build it with torch.no_grad)"
        ))
    from harness.autograd_bridge import saved_tensors as executor_saved_tensors

    try:
        remote = executor_saved_tensors(O)  # O came from the executor (pytest --isolate)
        return remote if remote is not None else tuple(O.grad_fn.saved_tensors)
    except (RuntimeError, AttributeError) as error:  # freed by an earlier backward, or not a Function's node
        raise AssertionError(place_rerun(f"could not read the saved tensors of O's grad_fn [{context}]: {error}")) from error


def saved_logsumexp(O: torch.Tensor, batch: int, n_queries: int, context: str) -> torch.Tensor:
    """The one saved tensor of shape (batch, n_queries): the logsumexp L. Fails unless exactly one."""
    saved = saved_tensors(O, context)
    candidates = [t for t in saved if tuple(t.shape) == (batch, n_queries)]
    if len(candidates) != 1:
        shapes = ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in saved) or "nothing"
        raise AssertionError(place_rerun(
            f"expected exactly one saved tensor of shape (batch, n_queries) = {(batch, n_queries)}, "
            f"the logsumexp L; found {len(candidates)} [{context}]. Saved: {shapes}. "
            "Call ctx.save_for_backward(..., L, ...) with L of shape (batch, n_queries) in float32."
        ))
    return candidates[0]


# What a refusal of CPU tensors says: its message names CUDA or a GPU, or a bare ``assert`` on the
# device (``assert Q.is_cuda``, ``assert Q.device.type == "cuda"``). A word like "device" in some
# other error's traceback (``torch.zeros(n, device=Q.device)`` in a TypeError's source line) is not one.
_REFUSAL_WORDS = re.compile(r"cuda|\bgpus?\b|nvidia|cpu tensor", re.IGNORECASE)
_DEVICE_ASSERT = re.compile(r"^assert\b.*(cuda|device|gpu)", re.IGNORECASE)
_FROM_SUBMISSION = "raised in the submission's process"  # the note harness/client.py's stand-ins carry
_KIT_CHECKS = tuple(str(Path(__file__).resolve().parents[1] / folder) for folder in ("tests", "harness"))


def raised_by_submission(error: BaseException) -> bool:
    """Whether ``error`` was raised by the submission's code (an ``assert`` of its own included),
    not by a check of these tests: under ``--isolate`` it came back from the executor (its
    stand-in carries the submission's traceback as a note); otherwise its innermost frame is
    outside the kit's tests/ and harness/ folders."""
    if any(_FROM_SUBMISSION in note for note in getattr(error, "__notes__", ()) or ()):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and not frames[-1].filename.startswith(_KIT_CHECKS)


def _error_text(error: BaseException) -> str:
    """The error's type, message, and the submission's traceback (its source lines show a bare
    ``assert Q.is_cuda``, whose message is empty)."""
    parts = [f"{type(error).__name__}: {error}", *(getattr(error, "__notes__", ()) or ())]
    if not getattr(error, "__notes__", None):
        parts += traceback.format_tb(error.__traceback__)
    return "\n".join(parts)


def _refusal_line(error: BaseException) -> str | None:
    """The line that shows ``error`` refusing CPU tensors (its message, or its bare ``assert`` on
    the device), or None when it is some other error."""
    message = str(error).strip()
    if message:
        first = f"{type(error).__name__}: {message.splitlines()[0][:300]}"
        return first if _REFUSAL_WORDS.search(message.splitlines()[0]) else None
    if not isinstance(error, AssertionError):
        return None
    line = next((line.strip() for line in reversed(_error_text(error).splitlines())
                 if _DEVICE_ASSERT.search(line.strip())), "")
    return f"AssertionError from `{line}`" if line else None


def explain_device_refusal(error: BaseException, device: str, call: str, *, triton: bool) -> None:
    """Raise an AssertionError that explains ``error`` when it is a Triton Function refusing CPU
    tensors on a CPU runner: an error its own code raised whose message names CUDA or a GPU (``Q
    must be a CUDA tensor``, ``expected device cuda:0``), or a bare ``assert`` on the device (``assert
    Q.is_cuda``). An error the submission's code did not raise (the tests' own checks, the kit's
    code, a crash of the submission's process: ExecutorFailure) and any other error (a TypeError
    whose traceback mentions ``device=``) are left alone. Else do nothing."""
    if not triton or device != "cpu" or isinstance(error, NotImplementedError) or _executor_failure(error):
        return
    if not raised_by_submission(error):  # the kit's own error is no refusal, whatever its words
        return
    first = _refusal_line(error)
    if first is None:
        return
    raise AssertionError(
        f"{call} refused CPU tensors: {first}\n"
        "This runner has no GPU, so the tests run your Triton kernels under Triton's interpreter "
        "(TRITON_INTERPRET=1), and the Triton Function receives CPU tensors. It must accept them "
        "(handout §2.4): call check_flash_attention_inputs(Q, K, V, is_causal, needs_triton=True) from "
        "cs336_systems/flash_attention_inputs.py, which allows CPU tensors under the interpreter, "
        "instead of asserting Q.is_cuda or device == 'cuda'; allocate O, L and gradients on Q.device "
        "(torch.empty_like(Q), device=Q.device), never on 'cuda'."
    ) from error


def _executor_failure(error: BaseException) -> bool:
    from harness.process import ExecutorFailure

    return isinstance(error, ExecutorFailure)


@contextlib.contextmanager
def reporting(case: FlashCase, implementation: str, check: str, call: str):
    """Around a call of the submission: a crash or timeout of its process (ExecutorFailure)
    is re-raised naming the case and its rerun command; a Triton Function's refusal of CPU
    tensors is explained (``explain_device_refusal``); any other error gets the rerun command
    as a note."""
    from harness.process import ExecutorFailure

    rerun = case.command(implementation, check)
    try:
        yield
    except ExecutorFailure as error:
        raise ExecutorFailure(f"{error}\n  while running {call} on {case}\n  rerun: {rerun}") from None
    except AssertionError as error:
        if raised_by_submission(error):  # the submission's own assert, e.g. ``assert Q.is_cuda``
            explain_device_refusal(error, case.device, call, triton=implementation == "triton")
            error.add_note(f"while running {call} on {case}\n  rerun: {rerun}")
        raise
    except Exception as error:  # noqa: BLE001  the submission's own error: say where it happened
        explain_device_refusal(error, case.device, call, triton=implementation == "triton")
        error.add_note(f"while running {call} on {case}\n  rerun: {rerun}")
        raise


def case_tolerance(case: FlashCase, quantity: str, implementation: str) -> dict[str, float]:
    """The tolerance for ``quantity`` of ``case``: harness/flash_tolerances.py's, with atol scaled
    by ``case.v_scale`` for the quantities that scale with V (O, dQ, dK; L and dV do not), so that
    an error relative to the size of V is judged the same at any scale."""
    tol = tolerance(case.dtype, quantity, implementation).elementwise()
    if quantity in ("O", "dQ", "dK"):
        tol["atol"] *= case.v_scale
    return tol


def case_norm_tolerance(case: FlashCase, quantity: str, implementation: str) -> dict[str, float]:
    """``{"rtol", "atol"}`` of the whole-tensor check of ``quantity``: the tolerance's ``norm``
    (harness/flash_tolerances.py), and the element-wise atol of ``case_tolerance``, which says where it applies."""
    return {"rtol": tolerance(case.dtype, quantity, implementation).norm, "atol": case_tolerance(case, quantity, implementation)["atol"]}


def _check_implementation(implementation: str) -> None:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")


def check_forward(
    function: type[torch.autograd.Function], case: FlashCase, implementation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``function.apply`` on ``case``; check O (shape, dtype, values) and the saved L; return both.

    ``implementation`` ("pytorch" or "triton") picks the tolerances (harness/flash_tolerances.py).
    L must be float32 of shape (batch, n_queries) and equal the natural-log logsumexp of the
    scaled (and masked) scores. Fails with the case and its rerun command in every message.
    """
    _check_implementation(implementation)
    context = case.repro(function.__name__, implementation, "forward")
    Q, K, V = case.make_inputs(requires_grad=True)
    with reporting(case, implementation, "forward", f"{function.__name__}.apply"):
        O = function.apply(Q, K, V, case.is_causal)
        assert_meta(O, shape=tuple(Q.shape), dtype=case.dtype, what="O", context=context)
        L = saved_logsumexp(O, case.batch, case.n_queries, context)
    assert_meta(L, shape=(case.batch, case.n_queries), dtype=torch.float32, what="saved logsumexp L", context=context)
    truth = case.truth(Q, K, V)
    assert_close(O, truth.O, **case_tolerance(case, "O", implementation), what="O", context=context)
    assert_close(L, truth.L, **case_tolerance(case, "L", implementation), what="saved logsumexp L", context=context)
    assert_norm_close(O, truth.O, **case_norm_tolerance(case, "O", implementation), what="O", context=context)
    return O, L


def check_backward(
    function: type[torch.autograd.Function], case: FlashCase, implementation: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run forward and backward (with a random dO) on ``case``; check dQ, dK, dV; return them."""
    _check_implementation(implementation)
    context = case.repro(function.__name__, implementation, "backward") + " (backward with dO = case.make_grad_output())"
    Q, K, V = case.make_inputs(requires_grad=True)
    dO = case.make_grad_output()
    with reporting(case, implementation, "backward", f"{function.__name__}.apply and its backward"):
        O = function.apply(Q, K, V, case.is_causal)
        grads = torch.autograd.grad(O, (Q, K, V), dO)
    truth = case.truth(Q, K, V, dO)
    for name, grad, expected, like in zip(("dQ", "dK", "dV"), grads, truth[2:], (Q, K, V)):
        assert_meta(grad, shape=tuple(like.shape), dtype=case.dtype, what=name, context=context)
        assert_close(grad, expected, **case_tolerance(case, name, implementation), what=name, context=context)
        assert_norm_close(grad, expected, **case_norm_tolerance(case, name, implementation), what=name, context=context)
    return grads


def first_case(device: str) -> FlashCase:
    """The case each Triton shape-fuzz test tries first (``@example``), before any drawn one.

    Small, so it is cheap under the interpreter and compiles one set of kernels on a GPU, yet it
    exercises what most kernel bugs need to show: a batch of two, n_queries != n_keys, both ragged
    for every tile size from 16 to 64 (70 = 64 + 6 queries, 45 = 32 + 13 keys), causal masking
    with keys running out before queries do, and every strided layout ("mixed"). A bug it shows
    fails the test here, on this one case and its rerun command, with no search and no shrinking:
    on a GPU each shape Hypothesis tries while shrinking compiles new kernels (about 10 s each).
    Bugs it misses are still searched for and shrunk as before.
    """
    return FlashCase(batch=2, n_queries=70, n_keys=45, d=32, dtype=torch.float32, is_causal=True,
                     layout="mixed", seed=0, device=device)


@st.composite
def flash_case_strategy(
    draw,
    *,
    dtypes: tuple[torch.dtype, ...],
    max_batch: int,
    max_tokens: int,
    device: str,
) -> FlashCase:
    """Hypothesis strategy: any batch, n_queries, n_keys (1..max_tokens, not only powers of two),
    d in HEAD_DIMS, a dtype from ``dtypes``, causal or not, any layout, any seed."""
    return FlashCase(
        batch=draw(st.integers(1, max_batch)),
        n_queries=draw(st.integers(1, max_tokens)),
        n_keys=draw(st.integers(1, max_tokens)),
        d=draw(st.sampled_from(HEAD_DIMS)),
        dtype=draw(st.sampled_from(dtypes)),
        is_causal=draw(st.booleans()),
        layout=draw(st.sampled_from(LAYOUTS)),
        seed=draw(st.integers(0, 2**31 - 1)),
        device=device,
    )
