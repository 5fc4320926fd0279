"""Is the attention of the Triton Function done by the submission's own Triton kernels? The harness decides.

Read by ``client.py`` (which asks once per harness process, or once per grade through a cache
file, before it credits any call of the Triton Function, and then applies ``check_triton_call``
to each call) and by staff reading the grader's threat model. Nothing here runs in the executor, and nothing the
executor reports decides the answer: the evidence is the submission's outputs, compared here
with a truth computed here, in two runs:

1. **As submitted**: the Function runs on a few cases drawn from the course secret (so a
   submission cannot recognise them) and must return the right O.
2. **With its kernels' writes removed**: the harness rewrites its own copy of the submission's
   source so that every ``@triton.jit`` function stores nothing (``tl.store``, descriptor
   ``.store`` and atomics become no-ops), starts a second executor on that copy and runs the
   same cases. If the output is still right, the attention was computed somewhere other than
   the kernels (PyTorch, SDPA, a library), whatever any launch log says.

A case the Function gets wrong as submitted proves nothing either way; at least one case must
be right as submitted and wrong (or refused) without the kernels' writes, and no case may stay
right without them. Forging a launch record, launching a kernel that does nothing, or
replacing the kit's instruments in the executor changes none of this. What is left to a
submission is to recognise the rewritten source and fail on purpose there, which takes
computing the attention elsewhere and defeating a check it was told about (the handout's §2.4).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from .triton_source import KernelReader  # the one reading of "@triton.jit"

STORE_NAMES = frozenset({"store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                         "atomic_xchg", "atomic_cas", "_experimental_descriptor_store", "async_copy_shared_to_global"})
SECRET_ENV = "CS336_HIDDEN_SEED"

# aten operators that compute attention: a Triton Function's forward must leave them to its kernels
ATTENTION_OPS = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "dot", "mv", "softmax", "_softmax", "log_softmax",
    "_log_softmax", "logsumexp", "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math", "_flash_attention_forward",
    "_efficient_attention_forward", "_cudnn_attention_forward", "flex_attention",
})


class _DropStores(ast.NodeTransformer):
    """Inside ``@triton.jit`` functions: a statement that only calls a store or an atomic becomes ``pass``."""

    def __init__(self, kernels: set[str]):
        self.kernels = kernels
        self.dropped = 0
        self.depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef):
        jit = node.name in self.kernels
        self.depth += jit
        self.generic_visit(node)
        self.depth -= jit
        return node

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if self.depth and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                and call.func.attr in STORE_NAMES:
            self.dropped += 1
            return ast.copy_location(ast.Pass(), node)
        return node


def drop_kernel_stores(source: str) -> tuple[str, int]:
    """``source`` with every store of its ``@triton.jit`` functions removed, and how many were removed.

    Source that does not parse is returned unchanged (it fails to import either way).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source, 0
    dropper = _DropStores(KernelReader(tree).kernels())
    tree = dropper.visit(tree)
    if not dropper.dropped:
        return source, 0
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", dropper.dropped


@dataclass(frozen=True)
class Case:
    """One provenance case: shapes, dtype and masking of a call of the Triton Function."""

    batch: int
    n_queries: int
    n_keys: int
    d: int
    dtype: str
    is_causal: bool
    seed: int

    def inputs(self, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        dtype = getattr(torch, self.dtype)
        return tuple(torch.randn(self.batch, n, self.d, generator=generator).to(device=device, dtype=dtype)
                     for n in (self.n_queries, self.n_keys, self.n_keys))

    def __str__(self) -> str:
        return (f"batch={self.batch}, n_queries={self.n_queries}, n_keys={self.n_keys}, d={self.d}, "
                f"dtype={self.dtype}, is_causal={self.is_causal}")


def cases(secret: str, device: str) -> list[Case]:
    """The cases for this course: derived from ``secret``, the same in every grade of a term."""
    rng = random.Random(hashlib.sha256(f"triton-provenance:{secret}".encode()).digest())
    dtypes = ["float32", "float16"] + (["bfloat16"] if device != "cpu" else [])
    chosen = [Case(1, 64, 64, 64, "float32", False, rng.randrange(2**31))]
    for index, dtype in enumerate(dtypes):
        d = rng.choice((16, 32, 64, 128))
        chosen.append(Case(rng.randint(1, 2), rng.randint(17, 96), rng.randint(17, 96), d, dtype,
                           index % 2 == 0, rng.randrange(2**31)))
    return chosen


@dataclass(frozen=True)
class Verdict:
    """``proven``: the kernels do the work; ``why``: what a failure message says; ``table``: per case."""

    proven: bool
    why: str
    table: tuple[tuple[str, str, str], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"proven": self.proven, "why": self.why, "table": self.table})

    @staticmethod
    def from_json(text: str) -> Verdict:
        data = json.loads(text)
        return Verdict(bool(data["proven"]), str(data["why"]), tuple(tuple(row) for row in data.get("table", ())))


def check_triton_call(verdict: Verdict, kernels: dict[str, set[str]], launches: list, aten) -> None:
    """Raise AssertionError unless one call of the Triton Function may earn credit.

    It may when (1) ``verdict`` (established by ``prove``, from outputs the harness judged
    itself) says the submission's kernels compute the attention, (2) the call's launch record
    shows one of ``kernels`` (``{file: names}``, from ``triton_source``) launched, and (3) its
    record of aten operators holds none of ``ATTENTION_OPS``. (2) and (3) are gathered in the
    executor, where the submission could forge them, so they only ever take credit away.
    """
    if not verdict.proven:
        raise AssertionError(f"no Triton credit: {verdict.why}")
    if not any(name in kernels.get(file, set()) for name, file in launches):
        seen = ", ".join(sorted({name for name, _ in launches})) or "none"
        defined = ", ".join(sorted(f"{file}:{name}" for file, names in kernels.items() for name in names)) or "none"
        raise AssertionError(
            "the Triton Function returned without launching a @triton.jit kernel defined in your submission "
            f"(kernels of your files launched: {seen}; @triton.jit functions found in your files: {defined}). "
            "Its forward must do the attention in your own Triton kernels: PyTorch operations, "
            "scaled_dot_product_attention, FlexAttention or kernels that torch.compile generates earn no Triton points."
        )
    names = {str(name) for name in aten if isinstance(name, str)} if isinstance(aten, list) else set()
    used = sorted(names & ATTENTION_OPS)
    if used:
        raise AssertionError(
            f"the Triton Function's forward ran attention math in PyTorch ({', '.join(used)}): the attention "
            "must be computed by your own @triton.jit kernels (handout §2.4); PyTorch may only check inputs, "
            "allocate outputs and launch the kernels.")


def _outcome(run, case: Case, device: str) -> tuple[str, str]:
    """("right" | "wrong" | "raised", detail) for one call of the Function, judged here."""
    from tests.checks.flash_reference import attention_float64
    from tests.checks.flash_tolerances import tolerance

    Q, K, V = (t.requires_grad_(True) for t in case.inputs(device))  # as the tests call it
    try:
        with torch.enable_grad():
            O = run(Q, K, V, case.is_causal)
    except Exception as error:  # noqa: BLE001  the submission's error, or its process failing
        return "raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    if not isinstance(O, torch.Tensor) or tuple(O.shape) != tuple(Q.shape):
        return "wrong", f"returned {type(O).__name__} {tuple(getattr(O, 'shape', ()))}"
    truth = attention_float64(Q, K, V, case.is_causal).O
    tol = tolerance(getattr(torch, case.dtype), "O", "triton")
    actual = O.detach().to(torch.float64)
    if not bool(torch.isfinite(actual).all()):
        return "wrong", "non-finite values"
    error = (actual - truth.to(actual.device)).abs()
    bound = tol.atol + tol.rtol * truth.to(actual.device).abs()
    bad = int((error > bound).sum())
    return ("right", "") if bad == 0 else ("wrong", f"{bad} of {error.numel()} elements off, max {float(error.max()):.3g}")


def judge(as_submitted: list[tuple[str, str]], without_writes: list[tuple[str, str]], chosen: list[Case],
          dropped: int) -> Verdict:
    """The verdict from the two runs' outcomes (one per case, in order)."""
    table = tuple((str(case), a[0], b[0]) for case, a, b in zip(chosen, as_submitted, without_writes))
    still_right = [case for case, a, b in zip(chosen, as_submitted, without_writes) if a[0] == "right" and b[0] == "right"]
    if still_right:
        return Verdict(False, (
            f"with every store of your @triton.jit kernels removed ({dropped} removed), the Triton Function still "
            f"returned the right O (for {still_right[0]}): the attention is computed outside your Triton kernels. "
            "The Triton Function's forward must compute O and L in your own kernels (handout §2.4); PyTorch, SDPA, "
            "FlexAttention and library kernels earn no Triton points, whatever else the Function launches."), table)
    shown = [case for case, a, b in zip(chosen, as_submitted, without_writes) if a[0] == "right"]
    if not shown:
        return Verdict(False, (
            "the Triton Function got none of the provenance cases right, so the grader cannot establish that your "
            f"Triton kernels compute the attention (first case: {chosen[0]}: {as_submitted[0][0]} "
            f"{as_submitted[0][1]}). Fix the forward for ordinary shapes first (handout §2.4)."), table)
    return Verdict(True, "your Triton kernels compute the attention: without their stores the output is wrong", table)


def prove(executor, settings_factory, device: str) -> Verdict:
    """Run both passes: ``executor`` is the harness's executor as submitted; ``settings_factory(transform)``
    gives the settings of a second executor whose copy of the source goes through ``transform``."""
    from .client import Executor

    secret = os.environ.get(SECRET_ENV, "public-provenance-cases")
    chosen = cases(secret, device)
    dropped_total = 0

    def transform(source: str) -> str:
        nonlocal dropped_total
        new, dropped = drop_kernel_stores(source)
        dropped_total += dropped
        return new

    def runner(target: Executor):
        # untagged calls: these are the evidence, not calls to be checked against it
        function = target.call("get_flashattention_autograd_function_triton", None, (), {}, None)

        def run(Q, K, V, is_causal):
            return function.apply(Q, K, V, is_causal)
        return run

    stripped = Executor(settings_factory(transform))
    stripped.begin_test()
    stripped.start(wait=False)  # it imports torch while the first run goes on
    as_submitted = [_outcome(runner(executor), case, device) for case in chosen]
    try:
        run = runner(stripped)
        without_writes = [_outcome(run, case, device) for case in chosen]
    except Exception as error:  # noqa: BLE001  the rewritten copy does not even import: its kernels mattered
        without_writes = [("raised", f"{type(error).__name__}")] * len(chosen)
    finally:
        stripped.stop()
    return judge(as_submitted, without_writes, chosen, dropped_total)


def cache_key(submission: Path, device: str) -> str:
    """A hash of what decides the verdict: the submission's Python source, the device, the secret's cases."""
    digest = hashlib.sha256(device.encode())
    digest.update(hashlib.sha256(os.environ.get(SECRET_ENV, "public-provenance-cases").encode()).digest())
    for path in sorted(Path(submission).rglob("*.py")):
        digest.update(path.relative_to(submission).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]
