"""Every request of the executor runs on the same ``triton.language``, whatever ran before it.

Under Triton's CPU interpreter (triton 3.6) a launch that calls a jit function from its kernel
(``tl.zeros`` is one) leaves 61 attributes of ``triton.language.core`` patched after it returns,
so a test's kernels ran on a language the tests before it had left, and a test could pass alone
and fail in a full grade. The executor now sets the language back between requests
(executor/triton_language.py); this runs that kernel through an executor and asks the
same process what the next request finds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.selftests.conftest import tiny_submission

pytest.importorskip("triton")

ADAPTERS = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _add_zeros(x_ptr, o_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs) + tl.zeros((N,), dtype=tl.float32))


    def run_kernel(x):
        o = torch.empty_like(x)
        _add_zeros[(1,)](x, o, N=x.numel())
        return o


    def maximum_outside_a_kernel():
        """tl.maximum called outside any kernel: Triton refuses it (no jit function around it)."""
        return torch.zeros(tl.maximum(3, 4)).numel()


    def cdiv_outside_a_kernel():
        """tl.cdiv (a jit function of Triton's) called outside any kernel: the interpreter runs it."""
        return torch.zeros(tl.cdiv(10, 4)).numel()


    def language_patched_by_the_interpreter():
        """The names of triton.language.core whose value the interpreter made (none after an import)."""
        import triton.language.core as core

        def maker(value):
            return getattr(getattr(value, "func", value), "__module__", "")

        return sorted(name for name, value in vars(core).items() if maker(value) == "triton.runtime.interpreter"
                      or (name == "static_print" and value is print))
''')


FILES = {"adapters.py": ADAPTERS}


@pytest.fixture
def adapters(interpreted_adapters):
    """The test submission's adapters, served by an executor under Triton's interpreter."""
    return interpreted_adapters(FILES)


def test_a_request_after_a_device_function_call_finds_the_language_as_imported(adapters):
    import torch

    assert adapters.language_patched_by_the_interpreter() == []
    x = torch.arange(8, dtype=torch.float32)
    assert torch.equal(adapters.run_kernel(x), x)  # the launch succeeds
    left = adapters.language_patched_by_the_interpreter()
    assert left == [], f"the next request ran on a language the kernel left patched: {len(left)} names, {left[:5]}"


def _outcome(call) -> str:
    try:
        return f"returned {call()!r}"
    except Exception as error:  # noqa: BLE001  the outcome is what is compared
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"


def test_what_the_submissions_code_does_outside_a_kernel_does_not_depend_on_earlier_kernels(adapters):
    """The same call, before and after other requests ran Triton code: the same outcome, Triton's
    refusal of a language function outside a kernel (after the interpreter had left its patches
    from these requests, the call returned 4 instead)."""
    import torch

    assert adapters.cdiv_outside_a_kernel() == 3
    first = _outcome(adapters.maximum_outside_a_kernel)
    assert first.startswith("ValueError"), first
    assert adapters.cdiv_outside_a_kernel() == 3
    adapters.run_kernel(torch.arange(8, dtype=torch.float32))
    assert _outcome(adapters.maximum_outside_a_kernel) == first


def test_the_snapshot_sets_back_what_a_launch_left_and_nothing_else(tmp_path):
    """In a child process (the patches would outlive this test in pytest's): the snapshot's
    restore sets back exactly the changed attributes, and a second launch still runs."""
    script = textwrap.dedent('''
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, sys.argv[1])
        import torch
        import adapters
        from executor.triton_language import LanguageSnapshot
        snapshot = LanguageSnapshot()
        x = torch.arange(8, dtype=torch.float32)
        adapters.run_kernel(x)
        left = adapters.language_patched_by_the_interpreter()
        assert len(left) > 0, "this Triton leaves no patch: the test shows nothing here"
        restored = snapshot.restore()
        assert {f"triton.language.core.{name}" for name in left} <= set(restored), (left, restored)
        assert adapters.language_patched_by_the_interpreter() == [] and snapshot.changed() == []
        assert snapshot.restore() == []
        assert torch.equal(adapters.run_kernel(x), x)
        print("ok", len(left))
    ''')
    kit = Path(__file__).resolve().parents[2]
    submission = tiny_submission(tmp_path / "submission", FILES)
    result = subprocess.run([sys.executable, "-c", script, str(submission)], cwd=kit, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(kit)})
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stdout[-2000:] + result.stderr[-3000:]
