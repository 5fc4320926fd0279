"""Rerun one FlashAttention-2 check from the command line, exactly as a failing test ran it.

Every FlashAttention-2 failure prints a command of this form (``FlashCase.command``); paste it
at the root of your checkout:

    TRITON_INTERPRET=1 .venv/bin/python -m tests.checks.flash_repro triton forward \\
        "FlashCase(batch=2, n_queries=17, n_keys=5, d=16, dtype=torch.float16, is_causal=True, layout='sliced', seed=3)"

It loads the submission the tests would (``--submission DIR``, else ``$CS336_SUBMISSION``, else
the current directory: harness/submission.py's ``resolve_submission_dir``), builds the
case's inputs, runs the same check as the test (``check_forward`` or ``check_backward`` of
harness/flash_cases.py, under the same tolerances) and prints ``passed`` or the same failure
message, with new tensors holding NaN as in the grader (``executor/uninitialized.py``), and
under the interpreter the autotune config at ``$CS336_INTERPRET_AUTOTUNE_CONFIG`` (default 0).
``TRITON_INTERPRET=1`` is how the tests run Triton without a GPU; it must be set
before triton is imported, so it goes in front of the command (leave it out on a GPU machine,
where the case says ``device='cuda'``).
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m tests.checks.flash_repro")

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("implementation", choices=("pytorch", "triton"))
    parser.add_argument("check", choices=("forward", "backward"))
    parser.add_argument("case", help='a FlashCase(...) expression, as printed by the failing test')
    parser.add_argument("--submission", default=None,
                        help="directory holding adapters.py and cs336_systems/ (default: $CS336_SUBMISSION, else .)")
    args = parser.parse_args(argv)

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from harness import gpus

    if not gpus.count() and os.environ.get("TRITON_INTERPRET") != "1":
        print("note: no GPU and TRITON_INTERPRET is not 1; Triton kernels cannot run. Prefix the command "
              "with TRITON_INTERPRET=1", file=sys.stderr)
    from executor import autotune, interpreter_memory
    from executor.uninitialized import filled
    from harness.flash_cases import FlashCase, check_backward, check_forward
    from harness.submission import SubmissionError, load_adapters, resolve_submission_dir

    try:
        root = resolve_submission_dir(args.submission, Path.cwd())
    except SubmissionError as error:
        print(f"flash_repro: {error}", file=sys.stderr)
        return 2
    print(f"flash_repro: testing the submission in {root}", file=sys.stderr)

    if os.environ.get("TRITON_INTERPRET") == "1":
        autotune.install(interpreter=True)  # as the tests do: one config per @triton.autotune under the interpreter
        interpreter_memory.install()  # as the tests do: an access outside a kernel's tensors is refused
    case = eval(args.case, {"FlashCase": FlashCase, "torch": torch})  # noqa: S307  the user's own command line
    if not isinstance(case, FlashCase):
        parser.error("the case must be a FlashCase(...) expression")
    adapters = load_adapters(root)
    function = (adapters.get_flashattention_autograd_function_pytorch() if args.implementation == "pytorch"
                else adapters.get_flashattention_autograd_function_triton())
    check = check_forward if args.check == "forward" else check_backward
    try:
        with filled():  # new tensors hold NaN, as in the grader's tests (executor/uninitialized.py)
            check(function, case, args.implementation)
    except AssertionError as failure:
        print(f"failed: {failure}")
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
