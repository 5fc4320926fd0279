"""Build a submission folder whose Triton FlashAttention-2 is the staff Gluon backward, for the kit's tests.

Staff tool (the tests it feeds need an sm_90 GPU). The folder is a copy of ``reference/`` whose
``get_flashattention_autograd_function_triton`` returns a Function with the reference's Triton forward
and the given Gluon backward variant (``backward.py``); inputs the Gluon path does not take (float32,
d not 64 or 128) run the reference's backward, as ``StaffFlashAttention`` says. The copy imports
``benchmarks.gluon`` from this checkout, so run its tests here without ``--isolate``:

    python -m benchmarks.gluon.staff_submission /tmp/staff --variant ws3_alt4_l2_kv
    python -m pytest tests/test_flash_backward.py autograder/hidden_tests/test_flash_backward_hidden.py \\
        --submission /tmp/staff -q
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ADAPTER = '''

# The staff Gluon backward (benchmarks/gluon/staff_submission.py). The Function is a module-level class:
# Its forward and backward call plain functions: torch.compile refused a Function whose backward called
# another Function's static backward (an AssertionError in dynamo, the compiled tests failed).
import sys as _sys

_sys.path.insert(0, {root!r})
import torch as _torch  # noqa: E402
from benchmarks.gluon.backward import staff_backward as _staff_backward  # noqa: E402
from benchmarks.gluon.backward import staff_forward as _staff_forward  # noqa: E402


class StaffGluonFlashAttention(_torch.autograd.Function):
    """The reference's Triton forward with the Gluon backward variant {variant!r}."""

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False):
        return _staff_forward(ctx, Q, K, V, is_causal, {variant!r})

    @staticmethod
    def backward(ctx, dO):
        return (*_staff_backward(ctx, dO), None)


def get_flashattention_autograd_function_triton():
    return StaffGluonFlashAttention
'''


def build(out: Path, variant: str) -> Path:
    """Copy ``reference/`` to ``out`` (which must not exist) and point its Triton adapter at ``variant``."""
    from benchmarks.gluon.backward import check_variant

    try:
        check_variant(variant)
    except ValueError as unknown:
        raise SystemExit(str(unknown)) from None
    if out.exists():
        raise SystemExit(f"{out} exists; give a new folder (nothing there is overwritten)")
    shutil.copytree(ROOT / "reference", out, ignore=shutil.ignore_patterns("__pycache__"))
    with open(out / "adapters.py", "a") as adapters:  # a later def replaces the reference's
        adapters.write(ADAPTER.format(variant=variant, root=str(ROOT)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="new folder for the submission")
    parser.add_argument("--variant", default="ws3_alt4_l2_kv")
    args = parser.parse_args(argv)
    print(build(args.out, args.variant))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "reference"))
    sys.exit(main())
