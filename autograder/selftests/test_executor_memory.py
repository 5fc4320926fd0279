"""Under Triton's CPU interpreter a kernel's stray load or store fails its own launch, and leaves nothing behind.

The interpreter's loads and stores are raw accesses to the process's heap, with no bounds check.
A real submission (16-row tiles stored with no ``boundary_check`` on 40 rows) wrote past its
tensors, and later tests in the same executor failed in PyTorch's argument parser on ordinary
calls ("zeros() takes 1 positional argument but 1 was given"), the replay process aborted in
``malloc``; each test passed alone. The executor and the replay process now refuse any access
outside the storages of the launch's tensors (executor/interpreter_memory.py). Here a kernel
stores through one argument's pointer into the memory of a tensor the submission keeps (a
deterministic stand-in for "past the end": without the guard the store lands, harmlessly to the
process, and changes what a later request reads); that tensor is passed to the launch too, so a
check of the real addresses against every argument's storage would let it through, as it let
an access past the end of Q through whenever K's storage happened to lie just after Q's.
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

KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def store_at(o_ptr, other_ptr, shift, BLOCK: tl.constexpr):
        tl.store(o_ptr + shift + tl.arange(0, BLOCK), tl.full((BLOCK,), 7.0, tl.float32))


    @triton.jit
    def load_at(x_ptr, o_ptr, shift, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, tl.load(x_ptr + shift + offs))


    @triton.jit
    def masked_tile(o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, tl.full((BLOCK,), 7.0, tl.float32), mask=offs < n)
        tl.atomic_add(o_ptr + offs, 1.0, mask=offs < n)
''')

ADAPTERS = textwrap.dedent('''
    import torch

    from cs336_systems.kernels import load_at, masked_tile, store_at

    KEPT = torch.zeros(64)  # a tensor of the submission's that no launch is passed


    def _shift_to_kept(o):
        return (KEPT.data_ptr() - o.data_ptr()) // o.element_size()


    def store_into_kept():
        """Through o's pointer into KEPT's memory, KEPT passed too: its memory, not o's."""
        o = torch.zeros(4)
        store_at[(1,)](o, KEPT, _shift_to_kept(o), BLOCK=16)
        return o


    def load_from_kept():
        o = torch.zeros(16)
        load_at[(1,)](o, o, _shift_to_kept(o), BLOCK=16)
        return o


    def kept_total():
        return float(KEPT.sum())


    def masked(n, block):
        o = torch.zeros(n)
        masked_tile[(1,)](o, n, BLOCK=block)
        return o
''')




def _outcome(call) -> str:
    try:
        return f"returned {call()!r}"
    except Exception as error:  # noqa: BLE001  the outcome is what is compared
        return f"{type(error).__name__}: {error}"


FILES = {"cs336_systems/kernels.py": KERNELS, "adapters.py": ADAPTERS}


@pytest.fixture
def adapters(interpreted_adapters):
    """The test submission's adapters, served by an executor under Triton's interpreter."""
    return interpreted_adapters(FILES)


def test_a_store_outside_the_launchs_tensors_fails_that_call_and_changes_nothing_later(adapters):
    import torch

    stored = _outcome(adapters.store_into_kept)
    assert "OutOfBoundsAccess" in stored and "store_at: a store reached memory outside" in stored, stored
    assert adapters.kept_total() == 0.0, "the refused store still reached the submission's tensor"
    loaded = _outcome(adapters.load_from_kept)
    assert "OutOfBoundsAccess" in loaded and "load_at: a load reached memory outside" in loaded, loaded
    # masked and atomic accesses inside the tensor run as before: 7 + 1 where the mask is true
    assert torch.equal(adapters.masked(5, 16), torch.full((5,), 8.0))
    assert adapters.kept_total() == 0.0


def test_the_replay_process_refuses_a_store_past_the_end_of_its_storage(tmp_path, monkeypatch):
    """The replay process runs the launches a record names on fresh storages: a launch that stores
    past the end of its only storage is refused there too (it corrupted that process's heap, and
    the next replay aborted), and the same process then replays an in-bounds launch."""
    from harness.process import ExecutorSettings
    from harness.replay import Replays

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    tmp_path.chmod(0o755)
    replays = Replays({"cs336_systems/__init__.py": "", "cs336_systems/kernels.py": KERNELS},
                      ExecutorSettings(submission=tmp_path / "unused", workdir=tmp_path / "replay"))
    storage = {"nbytes": 16, "dtype": "float32", "init": ["const", 0.0]}

    def launch(name, args):
        return {"file": "cs336_systems/kernels.py", "name": name, "grid": [1, 1, 1], "options": {}, "args": args}

    try:
        past_end = replays.run({"op": "replay", "storages": [storage],
                                "launches": [launch("store_at", {"o_ptr": ["tensor", 0, 0, [4], [1], "float32"],
                                                                 "other_ptr": ["tensor", 0, 0, [4], [1], "float32"],
                                                                 "shift": 0, "BLOCK": 256})]})
        message = str(past_end.get("error", {}).get("message", ""))
        assert "OutOfBoundsAccess" in message and "a store reached memory outside the tensor" in message, past_end
        inside = replays.run({"op": "replay", "storages": [storage],
                              "launches": [launch("masked_tile", {"o_ptr": ["tensor", 0, 0, [4], [1], "float32"],
                                                                  "n": 4, "BLOCK": 16})]})
        assert "ok" in inside, inside
        assert inside["ok"]["storages"][0].tolist() == [8.0] * 4
    finally:
        replays.close()


def test_views_of_one_storage_reach_each_other_and_the_refusal_says_where(tmp_path):
    """In a child process (the guard would outlive this test in pytest's): two views of one
    storage, passed as two arguments, may reach each other's elements (one storage, as on a
    GPU); one element before the storage is refused, the message saying which argument and where."""
    script = textwrap.dedent('''
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, sys.argv[1])
        import torch
        from executor.interpreter_memory import install
        install()
        from cs336_systems.kernels import load_at
        both = torch.arange(32, dtype=torch.float32)
        first, second, out = both[:16], both[16:], torch.zeros(16)
        load_at[(1,)](first, out, 16, BLOCK=16)  # second's elements, through first's pointer
        assert torch.equal(out, second), out
        load_at[(1,)](second, out, -16, BLOCK=16)  # first's elements, through second's pointer
        assert torch.equal(out, first), out
        try:
            load_at[(1,)](first, out, -1, BLOCK=16)
        except Exception as error:
            message = str(error)
        else:
            raise AssertionError("a load one element before the storage ran")
        assert "x_ptr: the first such element lies 4 bytes before the start of its storage" in message, message
        assert "at 1 of its 16 unmasked elements" in message, message
        print("ok")
    ''')
    kit = Path(__file__).resolve().parents[2]
    submission = tiny_submission(tmp_path / "submission", FILES)
    result = subprocess.run([sys.executable, "-c", script, str(submission)], cwd=kit, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(kit)})
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stdout[-2000:] + result.stderr[-3000:]
