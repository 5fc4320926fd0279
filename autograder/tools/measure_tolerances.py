"""Measure how far correct FlashAttention-2 submissions land from the float64 truth, per dtype.

Staff tool: the numbers it prints justify the tolerances in harness/flash_tolerances.py. For each
submission, each Function (PyTorch, Triton) and each dtype it runs ``--cases`` random cases
(random batch, n_queries, n_keys, d, causal flag, memory layout, Q scale and seed), runs forward
and backward with a random dO, and records per quantity (O, L, dQ, dK, dV):

- ``max abs``: the largest |actual - expected| seen;
- ``needed tol``: the largest |actual - expected| / (1 + |expected|), i.e. the smallest t for which
  every case passes ``|actual - expected| <= atol + rtol * |expected|`` with atol = rtol = t;
- ``norm``: the smallest r for which every case passes ``||actual - expected|| <= r * ||expected||``
  (Frobenius norms over the whole tensor), over the cases where the check applies: the expected
  tensor's RMS at least the element-wise atol the tests use (harness/flash_cases.py ``case_tolerance``). That is the check
  behind the tolerances' ``norm``; smaller expected tensors (an exactly zero gradient: one key
  makes the softmax constant) are left to the element-wise bound.

``--submission emulated`` measures a stand-in for a typical GPU kernel instead
(``EmulatedTensorCoreAttention``: matmul operands rounded to the input dtype, tf32 for float32,
float32 accumulation), so that a CPU run also bounds what tensor cores do to a correct kernel.
``--submission emulated-ieee`` is the same with float32 operands left unrounded: plain float32
arithmetic in another order than the reference's (the bound a PyTorch Function in float32 is
held to). ``--v-scale 1e5`` multiplies V (and so O) by that factor, as the cases that no 16-bit
accumulator survives do.

Run from the repo root (each submission runs in its own process, as the tests do):

    .venv/bin/python -m autograder.tools.measure_tolerances --submission reference --submission emulated \
        --submission fixtures/mutants/base --cases 100

Without CUDA the Triton kernels run under the interpreter (slow: keep the default small sizes)
and bfloat16 is measured for the PyTorch Function only (the interpreter's bf16 tl.dot is wrong).
With CUDA every dtype runs, at larger sizes (``--max-n``).
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.tools.measure_tolerances")

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUANTITIES = ("O", "L", "dQ", "dK", "dV")
EMULATED = "emulated"  # pseudo-submission: EmulatedTensorCoreAttention below
EMULATED_IEEE = "emulated-ieee"  # the same with float32 operands unrounded (plain float32 arithmetic)
Q_SCALES = (0.1, 1.0, 2.0)  # the Q scales the tests use: flat, standard and sharp softmax


def _round_operand(x, dtype, tf32: bool = True):
    """Round a float32 tensor the way a tensor-core dot rounds its operands: to ``dtype``, or to
    tf32 (10 explicit mantissa bits, round to nearest) when ``dtype`` is float32 (unless not ``tf32``)."""
    import torch

    if dtype == torch.float32 and not tf32:
        return x.float()
    if dtype != torch.float32:
        return x.to(dtype).float()
    bits = x.float().contiguous().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF  # keep 10 of 23 mantissa bits, rounding half up
    return bits.view(torch.float32)


class EmulatedTensorCoreAttention:
    """A stand-in for a typical GPU kernel: every matmul operand is rounded to the input dtype
    (tf32 for float32, the default of ``tl.dot``), products accumulate in float32, and O and the
    gradients are rounded to the input dtype at the end. Not a Function; ``apply`` returns O and
    stashes what the measuring loop reads."""

    __name__ = "EmulatedTensorCoreAttention"
    tf32 = True

    @classmethod
    def run(cls, Q, K, V, dO, is_causal):
        import math

        import torch

        from harness.flash_reference import causal_bias

        dtype = Q.dtype
        r = lambda t: _round_operand(t.detach().float(), dtype, cls.tf32)  # noqa: E731
        scale = 1.0 / math.sqrt(Q.shape[-1])
        s = r(Q) @ r(K).transpose(1, 2) * scale  # (B, Nq, Nk)
        if is_causal:
            s = s + causal_bias(Q.shape[1], K.shape[1], device=s.device, dtype=s.dtype)
        lse = torch.logsumexp(s, dim=-1)  # (B, Nq)
        p = torch.exp(s - lse[..., None])
        o = (r(p) @ r(V)).to(dtype)  # (B, Nq, d)
        delta = (o.float() * dO.float()).sum(-1)  # (B, Nq)
        dv = r(p).transpose(1, 2) @ r(dO)
        ds = p * (r(dO) @ r(V).transpose(1, 2) - delta[..., None])
        dq = r(ds) @ r(K) * scale
        dk = r(ds).transpose(1, 2) @ r(Q) * scale
        return o, lse, dq.to(dtype), dk.to(dtype), dv.to(dtype)


class EmulatedFloat32Attention(EmulatedTensorCoreAttention):
    """EmulatedTensorCoreAttention without tf32: float32 operands stay float32."""

    __name__ = "EmulatedFloat32Attention"
    tf32 = False


def _random_case(rng: random.Random, max_n: int, dtype, cuda: bool, v_scale: float):
    """One random FlashCase of ``dtype``: batch, lengths up to ``max_n``, d, causal flag, layout, seed, Q scale."""
    from harness.flash_cases import HEAD_DIMS, LAYOUTS, FlashCase

    return FlashCase(batch=rng.randint(1, 3), n_queries=rng.randint(1, max_n), n_keys=rng.randint(1, max_n),
                     d=rng.choice(HEAD_DIMS), dtype=dtype, is_causal=rng.random() < 0.5, layout=rng.choice(LAYOUTS),
                     seed=rng.randrange(2**31), device="cuda" if cuda else "cpu", q_scale=rng.choice(Q_SCALES),
                     v_scale=v_scale)


def _record_errors(worst: dict, case, function_name: str, outputs, truth) -> None:
    """Fold one case's errors of O, L, dQ, dK, dV against the float64 truth into ``worst``."""
    from harness.assertions import norm_check_applies
    from harness.flash_cases import case_tolerance

    for quantity, actual, expected in zip(QUANTITIES, outputs, truth):
        a = actual.detach().double().cpu()
        e = expected.detach().double().cpu()
        error = (a - e).abs()
        max_abs = float(error.max())
        needed = float((error / (1 + e.abs())).max())
        slot = worst[quantity]
        if needed > slot["needed_tol"]:
            slot["case"] = str(case)
        slot["max_abs"] = max(slot["max_abs"], max_abs)
        atol = case_tolerance(case, quantity, "pytorch" if function_name == "pytorch" else "triton")["atol"]
        if norm_check_applies(e, atol):
            slot["norm"] = max(slot["norm"], float((a - e).norm() / e.norm()))
        slot["needed_tol"] = max(slot["needed_tol"], needed)


def _measure_one_submission(submission: str, cases: int, max_n: int, seed: int, functions: list[str],
                            dtype_names: list[str] | None = None, v_scale: float = 1.0) -> list[dict]:
    """Run in a child process: measure one submission; return one row per (function, dtype).
    ``dtype_names`` (e.g. ["bfloat16"]) restricts the dtypes; None measures all three."""
    import torch

    from harness import gpus
    from harness.submission import load_adapters

    cuda = gpus.count() > 0
    if submission in (EMULATED, EMULATED_IEEE):
        emulation = EmulatedTensorCoreAttention if submission == EMULATED else EmulatedFloat32Attention
        getters = {"emulated": lambda: emulation}
        functions = ["emulated"]
    else:
        adapters = load_adapters(Path(submission))
        getters = {
            "pytorch": adapters.get_flashattention_autograd_function_pytorch,
            "triton": adapters.get_flashattention_autograd_function_triton,
        }
    rows = []
    rng = random.Random(seed)
    for name in functions:
        function = getters[name]()
        dtypes = [torch.float32, torch.float16, torch.bfloat16]
        if name == "triton" and not cuda:
            dtypes = [torch.float32, torch.float16]
        if dtype_names:
            dtypes = [t for t in dtypes if str(t).removeprefix("torch.") in dtype_names]
        for dtype in dtypes:
            worst = {q: {"max_abs": 0.0, "needed_tol": 0.0, "norm": 0.0, "case": ""} for q in QUANTITIES}
            for _ in range(cases):
                case = _random_case(rng, max_n, dtype, cuda, v_scale)
                Q, K, V = case.make_inputs(requires_grad=True)
                dO = case.make_grad_output()
                if isinstance(function, type) and issubclass(function, EmulatedTensorCoreAttention):
                    O, L, *grads = function.run(Q, K, V, dO, case.is_causal)
                else:
                    O = function.apply(Q, K, V, case.is_causal)
                    L = [t for t in O.grad_fn.saved_tensors if tuple(t.shape) == (case.batch, case.n_queries)][0]
                    grads = torch.autograd.grad(O, (Q, K, V), dO)
                truth = case.truth(Q, K, V, dO)
                _record_errors(worst, case, name, (O, L, *grads), truth)
            rows.append({"submission": submission, "function": name, "dtype": str(dtype).removeprefix("torch."),
                         "device": "cuda" if cuda else "cpu", "cases": cases, "worst": worst})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", action="append",
                        help=f"submission directory (repeatable); {EMULATED!r} measures EmulatedTensorCoreAttention")
    parser.add_argument("--cases", type=int, default=100, help="random cases per (function, dtype)")
    parser.add_argument("--max-n", type=int, default=None, help="largest n_queries / n_keys (default 160 CPU, 1024 GPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--functions", default="pytorch,triton", help="comma-separated: pytorch,triton")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16",
                        help="comma-separated dtypes to measure (on a GPU each new case compiles kernels: "
                             "'--functions triton --dtypes bfloat16 --cases 30' takes minutes, all of them far longer)")
    parser.add_argument("--v-scale", type=float, default=1.0, help="multiply V by this (1e5: past the float16 range)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    submissions = args.submission or ["reference"]
    functions = args.functions.split(",")

    dtype_names = [name.strip() for name in args.dtypes.split(",") if name.strip()]
    unknown = set(dtype_names) - {"float32", "float16", "bfloat16"}
    if unknown or not dtype_names:
        parser.error(f"--dtypes: unknown {sorted(unknown)}; use float32, float16 and/or bfloat16")

    if args.child:
        rows = _measure_one_submission(submissions[0], args.cases, args.max_n, args.seed, functions, dtype_names,
                                       args.v_scale)
        print("ROWS " + json.dumps(rows))
        return 0

    from harness import gpus  # only to pick defaults; the measuring happens in child processes

    cuda = gpus.count() > 0
    max_n = args.max_n or (1024 if cuda else 160)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not cuda:
        env.setdefault("TRITON_INTERPRET", "1")
    rows = []
    for submission in submissions:
        command = [
            sys.executable, "-m", "autograder.tools.measure_tolerances", "--child",
            "--submission", submission, "--cases", str(args.cases), "--max-n", str(max_n),
            "--seed", str(args.seed), "--functions", args.functions, "--dtypes", args.dtypes,
            "--v-scale", str(args.v_scale),
        ]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"measuring {submission} failed:\n{done.stdout}\n{done.stderr}", file=sys.stderr)
            return 1
        line = [x for x in done.stdout.splitlines() if x.startswith("ROWS ")][-1]
        rows.extend(json.loads(line[5:]))

    print(f"max over {args.cases} random cases per row (n_queries, n_keys <= {max_n}, Q scales {Q_SCALES}, "
          f"V scale {args.v_scale:g})")
    print("each cell: needed tol (max abs error) [largest norm-relative error]\n")
    print("| submission | function | dtype | device | " + " | ".join(QUANTITIES) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in QUANTITIES) + " |")
    for row in rows:
        cells = [f"{row['worst'][q]['needed_tol']:.2e} ({row['worst'][q]['max_abs']:.2e}) [{row['worst'][q]['norm']:.1e}]"
                 for q in QUANTITIES]
        print(f"| {row['submission']} | {row['function']} | {row['dtype']} | {row['device']} | " + " | ".join(cells) + " |")
    print("\nworst case per cell:")
    for row in rows:
        for q in QUANTITIES:
            print(f"  {row['submission']} {row['function']} {row['dtype']} {q}: {row['worst'][q]['case']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
