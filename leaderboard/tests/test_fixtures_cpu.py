"""Each cheat a CPU can judge is refused for its own reason, by the leaderboard's own checks.

The checks run in this process on the fixture's autograd.Function (``worker.evaluate`` with
``Fn``), on the dry-run problem under Triton's interpreter: the same code path as
``python -m leaderboard run FIXTURE --dry-run`` minus the process start. ``test_cli_dry_run``
runs the real command on the honest fixture and on the patched-timers cheat.
"""

import importlib.util
import os
import sys

import pytest
import torch

from leaderboard.fixtures import FIXTURES
from leaderboard.worker import evaluate

IN_PROCESS = [f for f in FIXTURES if f.cpu_refusals and f.name != "cheat_patched_timers"]

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="dry-run checks run Triton's interpreter (machines without a GPU)"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # numpy, inside Triton's interpreter
]


@pytest.fixture
def dry_run_process(monkeypatch):
    """What the worker sets up for --dry-run, undone afterwards."""
    from triton.runtime.interpreter import InterpretedFunction

    monkeypatch.setattr(InterpretedFunction, "run", torch._dynamo.disable(InterpretedFunction.run))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch._dynamo.reset()


def load_function(fixture):
    """The fixture's FlashAttentionTriton, imported under a name of its own."""
    name = f"leaderboard_fixture_{fixture.name}"
    spec = importlib.util.spec_from_file_location(name, fixture.path / "cs336_systems" / "flash_attention_triton.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile imports the function's module by name
    spec.loader.exec_module(module)
    return module.FlashAttentionTriton


@pytest.mark.parametrize("fixture", IN_PROCESS, ids=lambda f: f.name)
def test_cheat_is_refused_for_its_reason(fixture, dry_run_process):
    result = evaluate(None, "dry-run", seed=0, Fn=load_function(fixture))
    codes = [r["code"] for r in result["refusals"]]
    assert not result["accepted"]
    assert set(fixture.cpu_refusals) <= set(codes), result["refusals"]
    assert "error" not in codes, result.get("traceback")
