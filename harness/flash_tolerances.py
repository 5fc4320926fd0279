"""How close a FlashAttention-2 result must be to the float64 truth: the one tolerance model and
every table stated in it.

Read by harness/flash_cases.py (every FlashAttention-2 check), by the leaderboard's correctness
gate and by TAs who wonder why a number is what it is.

The model (``Tolerance``): a tensor passes when it is finite and

- element by element, ``|actual - expected| <= atol + rtol * |expected| + max_frac * max|expected|``;
- as a whole (where ``norm`` is set), ``||actual - expected|| <= norm * ||expected||`` (Frobenius
  norms), judged where the expected tensor's RMS is at least ``atol`` (harness/assertions.py
  ``norm_check_applies``): below that, as for an exactly zero gradient, the element bound judges alone.

Two sets of values, measured for different shapes:

- ``TOLERANCES`` and ``PYTORCH_FLOAT32``, the tests' (``tolerance(dtype, quantity,
  implementation)``): the first for the Triton Function and for 16-bit runs of the PyTorch one,
  the second for the PyTorch Function in float32. Shapes of up to a few thousand keys, any dtype;
  element bounds (atol, rtol) plus a norm. They set no ``max_frac``: the tests' assert_close has
  no such term (``Tolerance.elementwise`` refuses one).
- ``GATE_TOLERANCES``, the leaderboard's: one shape, (16, 16384, 64) causal, where the gate bounds
  the norm and each element against the tensor's largest value (atol = rtol = 0). Their provenance
  is at the end of this docstring.

Every number below comes from a measurement by the course staff's tolerance tool over three
correct implementations (the staff solution, an emulation of GPU rounding, and a second
correct solution): 100 random cases per (Function, dtype): batch 1-3, n_queries and n_keys 1-160,
d in {16, 32, 64, 128}, causal or not, every memory layout, Q scaled by 0.1, 1 or 2, with a
random dO. The "needed" numbers are the smallest t with atol = rtol = t that passes every case.
``emulated`` is a stand-in for a GPU kernel that feeds tensor cores: every matmul operand
rounded to the input dtype (to tf32 for float32, the default of ``tl.dot``), float32
accumulation; it bounds what a correct kernel that does not upcast loses on a GPU.

Measured on the CPU stack (torch 2.13, triton 3.6 interpreter), max over 100 cases per row,
"needed tol" except L (max absolute error):

| dtype    | source                | O       | L (abs) | dQ      | dK      | dV      |
| -------- | --------------------- | ------- | ------- | ------- | ------- | ------- |
| float32  | emulated (tf32 dots)  | 2.0e-03 | 2.4e-03 | 2.3e-03 | 7.4e-03 | 3.7e-03 |
| float32  | reference PyTorch     | 1.7e-06 | 3.0e-06 | 1.6e-06 | 7.2e-06 | 2.6e-06 |
| float32  | reference Triton      | 2.6e-06 | 3.8e-06 | 1.5e-06 | 4.4e-06 | 4.0e-06 |
| float32  | base PyTorch / Triton | 1.7e-06 | 3.0e-06 | 1.8e-06 | 6.2e-06 | 2.4e-06 |
| float16  | emulated              | 5.6e-04 | 2.7e-06 | 1.6e-03 | 4.1e-03 | 1.7e-03 |
| float16  | reference PyTorch     | 3.1e-04 | 2.7e-06 | 1.4e-03 | 3.3e-03 | 4.2e-04 |
| float16  | reference Triton      | 4.3e-04 | 1.9e-06 | 1.2e-03 | 2.9e-03 | 2.6e-03 |
| float16  | base Triton           | 3.9e-04 | 1.6e-06 | 1.5e-03 | 3.4e-03 | 1.7e-03 |
| bfloat16 | emulated              | 4.4e-03 | 1.2e-06 | 1.6e-02 | 3.0e-02 | 1.5e-02 |
| bfloat16 | reference PyTorch     | 2.6e-03 | 9.5e-07 | 9.2e-03 | 2.5e-02 | 3.2e-03 |
| bfloat16 | reference Triton, H200| 2.6e-03 | 2.1e-07 | 1.2e-02 | 2.0e-02 | 8.3e-03 |

Triton in bfloat16 cannot be measured under the interpreter (its bf16 ``tl.dot`` is wrong), so
its row comes from an H200 (torch 2.11, triton 3.6): the same tool, 30 cases of the staff
solution's Triton Function in bfloat16 only, 83 s (a staff GPU run of 2026-11-29). Every cell is within the emulated row's
rounding, and each bound below is at least 4 times it. The same run over every dtype and three
submissions did not finish in 7 minutes there: nearly every random case is a new Triton
specialisation, with kernels to compile. Each
tolerance other than L for 16-bit inputs is 2.5 to 4 times the worst measured error, rounded
up to a 1-2-5 step (1.5 for bfloat16 O). Why the rows look as they do:

- float32 allows tf32: ``tl.dot`` on float32 uses tf32 by default, which rounds Q and K to 10
  mantissa bits, so float32 is as loose as float16 (looser for L: float16 inputs reach the dot
  unrounded). Most CS336 float32 solutions use that default, and they must keep passing.
- L is compared with an absolute tolerance only (an error in L is a relative error in the
  softmax denominator). For float16 and bfloat16 inputs it is tight: products of two 16-bit
  numbers are exact in float32, so a kernel that accumulates QK^T in float32 (tl.dot does;
  in PyTorch, upcast the tiles first) gets L right to about 1e-6. A kernel that rounds scores,
  the running max or the running sum to 16 bits is off by 1e-3 to 1e-1 and fails, as it should.
  The tolerance, 5e-4, is far above the 2.7e-6 measured: GPU exp2/log2 approximations and
  rows of 16384 keys add error this CPU run cannot see; it is still 190 times below the 0.096
  that a running sum kept in bfloat16 costs on 4096 keys (a buggy solution the staff test the
  grader with, ``stats_in_input_dtype``, which passes the bfloat16 O tolerance).
- dK has the largest errors: each element sums n_queries terms that cancel.

The PyTorch Function in float32 is held to float32 arithmetic (``PYTORCH_FLOAT32``), not to
tf32: PyTorch's float32 matmuls do not use tf32 unless a program asks for it, so only Triton's
``tl.dot`` gets that allowance. Measured with ``--functions pytorch --dtypes float32`` (CPU,
torch 2.13), "needed tol" (max abs error in parentheses for L):

| source                                  | cases, n <=  | O       | L (abs) | dQ      | dK      | dV      |
| --------------------------------------- | ------------ | ------- | ------- | ------- | ------- | ------- |
| reference PyTorch                       | 100, 160     | 1.7e-06 | 3.0e-06 | 2.7e-06 | 7.0e-06 | 2.7e-06 |
| emulated-ieee (float32, another order)  | 100, 160     | 1.6e-06 | 3.0e-06 | 2.6e-06 | 6.2e-06 | 2.6e-06 |
| base PyTorch                            | 100, 160     | 1.7e-06 | 3.0e-06 | 1.8e-06 | 7.0e-06 | 2.2e-06 |
| reference / emulated-ieee / base        | 25, 1100     | 1.7e-06 | 3.5e-06 | 1.9e-06 | 4.1e-06 | 2.2e-06 |

Each bound is about 7 times the worst of these (12 for O), on a 1-2-5 step. A float16 output
accumulator errs by 6e-4 to 1e-3 in float32 runs and overflows once |V| passes 65504, so it
fails here (the ``accumulator_float16_pytorch`` mutant). Cases with ``v_scale`` (V multiplied
by 1e5, past the float16 range) catch it in the Triton Function too, whose tf32 tolerance
would hide its rounding: there atol is multiplied by ``v_scale`` for O, dQ and dK
(harness/flash_cases.py ``case_tolerance``), so the error is judged relative to the size of V.

The leaderboard's gate (``GATE_TOLERANCES``) judges O, dQ, dK and dV at its own shape, batch 16
(heads folded in), 16384 queries and keys, d 64, causal, bfloat16, with atol = rtol = 0: ``norm``
bounds the average error (precision) and ``max_frac`` catches a wrong tile or row that an average
would hide (an element off by more than that fraction of the tensor's largest value). bfloat16
keeps 8 significant bits (unit roundoff 2^-9): rounding O or a gradient once costs about 2e-3 in
relative L2. A CPU emulation of an FA2 kernel that rounds exactly where a bf16 Triton kernel does
(P before P @ V, dS before dS @ K, every output) measured relative L2 errors of 2.3e-3 to 2.6e-3
and max-abs fractions of 3e-3 to 7e-3 at n = 1024 and 4096; the bfloat16 bounds leave 4x to 8x
headroom, while a wrong scale, mask or tile is off by 0.1 or more. The float16 and float32 rows
have no measurement of their own: float16 and tf32 (which a GPU kernel's float32 dots may use)
keep 11 significant bits, 4 times finer than bfloat16, and their bounds are half the bfloat16
norms and 0.02 of the largest value. Only the float32 row judges anything today, at the leaderboard's
``--cpu`` problem (2, 64, 16).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

QUANTITIES = ("O", "L", "dQ", "dK", "dV")
IMPLEMENTATIONS = ("pytorch", "triton")


@dataclass(frozen=True)
class Tolerance:
    """How close one tensor must be to the float64 truth (the rule is in the module docstring).

    atol, rtol: the element bound's absolute and per-element relative terms; ``max_frac``: its
    term relative to the largest |expected| of the tensor. ``norm``: the whole-tensor bound on
    ||actual - expected|| / ||expected||, or None where only elements are judged (L).
    """

    atol: float
    rtol: float
    norm: float | None = None
    max_frac: float = 0.0

    def elementwise(self) -> dict[str, float]:
        """``{"atol", "rtol"}``, the keywords of harness/assertions.py ``assert_close``."""
        if self.max_frac:
            raise ValueError(f"{self} bounds elements relative to the tensor's maximum, which assert_close cannot apply")
        return {"atol": self.atol, "rtol": self.rtol}


# The tests' bounds: element-wise, the worst error measured (the tables above) beside each; and
# ``norm``, the whole tensor's error, as well as each element's: ||actual - expected|| <= norm *
# ||expected|| (Frobenius norms), where the expected tensor's RMS is at least the element-wise atol. An
# element-wise bound loose enough for tf32 dots (dK: 2e-2, where a correct tf32 kernel's element
# can be off by 7e-3) also passes a gradient that is 2-4% off everywhere; the norm bound does not,
# because rounding errors do not all point the same way and a bug's do. Smaller expected tensors
# (an exactly zero gradient: one key makes the softmax constant) are left to the element-wise bound
# (harness/assertions.py ``norm_check_applies``).
#
# norm from the largest norm-relative errors measured on correct kernels (``measure_tolerances``,
# 2026-12-02): the tensor-core stand-in on the CPU (``--submission emulated --cases 100``: float32
# with tf32 dots at most 1.0e-3, float16 7.8e-4, bfloat16 5.1e-3) and a typical CS336 Triton
# kernel with tf32 dots on an H200 (float32, 8 cases: O 1.3e-3, dQ 2.1e-3, dK 2.1e-3, dV 1.6e-3).
# float32: about 3x the H200's tf32 kernel; float16 and bfloat16: 5-6x the stand-in. The staff
# solution's own errors are far smaller (float32: 6e-7 on the H200). A backward that recomputes P
# from L rounded to bfloat16 is off by about 1.1e-2 at 1x17x257, which no element-wise bound there sees.
TOLERANCES: dict[torch.dtype, dict[str, Tolerance]] = {
    torch.float32: {
        "O": Tolerance(5e-3, 5e-3, norm=6e-3),  # tf32 emulated 2.0e-3
        "L": Tolerance(1e-2, 0.0),  # tf32 emulated 2.4e-3 abs
        "dQ": Tolerance(1e-2, 1e-2, norm=6e-3),  # tf32 emulated 2.3e-3
        "dK": Tolerance(2e-2, 2e-2, norm=6e-3),  # tf32 emulated 7.4e-3
        "dV": Tolerance(1e-2, 1e-2, norm=6e-3),  # tf32 emulated 3.7e-3
    },
    torch.float16: {
        "O": Tolerance(2e-3, 2e-3, norm=4e-3),  # emulated 5.6e-4, reference Triton 4.3e-4
        "L": Tolerance(5e-4, 0.0),  # 2.7e-6 abs: float32 scores from exact float16 products
        "dQ": Tolerance(5e-3, 5e-3, norm=4e-3),  # emulated 1.6e-3
        "dK": Tolerance(1e-2, 1e-2, norm=4e-3),  # emulated 4.1e-3
        "dV": Tolerance(1e-2, 1e-2, norm=4e-3),  # reference Triton 2.6e-3, emulated 1.7e-3
    },
    torch.bfloat16: {
        "O": Tolerance(1.5e-2, 1.5e-2, norm=3e-2),  # emulated 4.4e-3
        "L": Tolerance(5e-4, 0.0),  # 1.2e-6 abs: float32 scores from exact bfloat16 products
        "dQ": Tolerance(5e-2, 5e-2, norm=3e-2),  # emulated 1.6e-2
        "dK": Tolerance(1e-1, 1e-1, norm=3e-2),  # emulated 3.0e-2
        "dV": Tolerance(5e-2, 5e-2, norm=3e-2),  # emulated 1.5e-2
    },
}


# The PyTorch Function in float32 is held to float32 arithmetic: PyTorch's float32 matmuls do
# not use tf32 unless asked (torch.backends.cuda.matmul.allow_tf32 is False by default), so
# the tf32 allowance above is for Triton's tl.dot only. Its norm bounds are float32's.
PYTORCH_FLOAT32: dict[str, Tolerance] = {
    "O": Tolerance(2e-5, 2e-5, norm=6e-3),  # measured 1.7e-6
    "L": Tolerance(2e-5, 0.0),  # measured 3.5e-6 abs
    "dQ": Tolerance(2e-5, 2e-5, norm=6e-3),  # measured 2.7e-6
    "dK": Tolerance(5e-5, 5e-5, norm=6e-3),  # measured 7.0e-6
    "dV": Tolerance(2e-5, 2e-5, norm=6e-3),  # measured 2.7e-6
}


def tolerance(dtype: torch.dtype, quantity: str, implementation: str) -> Tolerance:
    """The tests' tolerance for ``quantity`` (one of QUANTITIES) of a ``dtype`` run of the
    ``implementation`` ("pytorch" or "triton") Function."""
    if dtype not in TOLERANCES:
        raise ValueError(f"no FlashAttention-2 tolerance for dtype {dtype}; use one of {list(TOLERANCES)}")
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; use one of {QUANTITIES}")
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}; use one of {IMPLEMENTATIONS}")
    if implementation == "pytorch" and dtype == torch.float32:
        return PYTORCH_FLOAT32[quantity]
    return TOLERANCES[dtype][quantity]


# The leaderboard's correctness gate, at its one shape (provenance: the end of the module docstring).
GATE_TOLERANCES: dict[torch.dtype, dict[str, Tolerance]] = {
    torch.bfloat16: {
        "O": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.05),  # emulated bf16 FA2: 2.3e-3 to 2.6e-3, max 3e-3 to 7e-3
        "dQ": Tolerance(0.0, 0.0, norm=2e-2, max_frac=0.05),
        "dK": Tolerance(0.0, 0.0, norm=2e-2, max_frac=0.05),
        "dV": Tolerance(0.0, 0.0, norm=2e-2, max_frac=0.05),
    },
    torch.float16: {
        "O": Tolerance(0.0, 0.0, norm=5e-3, max_frac=0.02),
        "dQ": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
        "dK": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
        "dV": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
    },
    torch.float32: {  # a GPU kernel may use tf32 dots
        "O": Tolerance(0.0, 0.0, norm=5e-3, max_frac=0.02),
        "dQ": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
        "dK": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
        "dV": Tolerance(0.0, 0.0, norm=1e-2, max_frac=0.02),
    },
}
