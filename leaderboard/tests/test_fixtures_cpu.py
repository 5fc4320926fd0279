"""Each cheat a CPU can judge is refused for its own reason, by the leaderboard's own checks.

The checks run in this process on the fixture's autograd.Function (``evaluate_in_process`` below:
the worker's steps, then the parent's judgement of its messages), on the CPU problem under
Triton's interpreter: the same code path as ``python -m leaderboard run FIXTURE --cpu``
minus the processes and the sandbox. ``test_cli_cpu`` runs the real command on the honest
fixture and on the patched-timers cheat, and ``test_attacks_cpu`` the attacks on the parent.
"""

import importlib
import importlib.util
import os
import sys

import pytest
import torch

from fixtures import materialize
from fixtures.leaderboard import FIXTURES
from leaderboard.kernels import submission_triton_names
from leaderboard.parent import judgement_record, parent_matmul, submission_files


def evaluate_in_process(Fn, mode: str, triton_names: set[str], seed: int = 0, repeats: int = 1) -> dict:
    """The worker's steps on ``Fn`` in this process, judged as the parent judges a worker (for
    the leaderboard's own tests): the same record fields, minus the process, the sandbox and
    the parent's replay (which fixtures marked ``replayed`` go through: test_attacks_cpu.py)."""
    from leaderboard.protocol import MemoryChannel
    from leaderboard.verdict import Observed, Run, judge
    from leaderboard.worker import evaluate

    run = Run(mode, repeats, seed, set(triton_names))
    channel = MemoryChannel()
    channel.send("hello", uid=os.getuid(), gid=os.getgid())
    evaluate(None, mode, channel, repeats, seed, triton_names=run.triton_names, Fn=Fn)
    return judgement_record(judge(Observed(channel.messages), run, parent_matmul(mode)), run)


IN_PROCESS = [f for f in FIXTURES if f.verdict.cpu_refusals and f.verdict.in_process]

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="--cpu checks run Triton's interpreter (machines without a GPU)"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # numpy, inside Triton's interpreter
]


@pytest.fixture
def cpu_process(monkeypatch):
    """What the worker sets up for --cpu, undone afterwards."""
    from triton.runtime.interpreter import InterpretedFunction

    from leaderboard.worker_boot import record_interpreted_launches

    monkeypatch.setattr(InterpretedFunction, "run", InterpretedFunction.run)  # restored afterwards
    record_interpreted_launches()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch._dynamo.reset()


def load_function(name, submission):
    """The FlashAttentionTriton of fixture ``name`` (materialized at ``submission``), its
    cs336_systems imported as a package of its own name."""
    package = f"leaderboard_fixture_{name}"
    if package not in sys.modules:
        directory = submission / "cs336_systems"
        spec = importlib.util.spec_from_file_location(package, directory / "__init__.py", submodule_search_locations=[str(directory)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module  # torch.compile imports the function's module by name
        spec.loader.exec_module(module)
    return importlib.import_module(f"{package}.flash_attention_triton").FlashAttentionTriton


@pytest.mark.parametrize("fixture", IN_PROCESS, ids=lambda f: f.name)
def test_cheat_is_refused_for_its_reason(fixture, cpu_process, tmp_path):
    submission = materialize(fixture, tmp_path / fixture.name)
    names = submission_triton_names(submission_files(submission))
    record = evaluate_in_process(load_function(fixture.name, submission), "cpu", names, seed=0)
    codes = [r["code"] for r in record["refusals"]]
    assert not record["accepted"]
    assert set(fixture.verdict.cpu_refusals) <= set(codes), record["refusals"]
    assert "error" not in codes, record.get("traceback")
