"""The training-step board's ``--cpu`` run: the whole pipeline with gloo on two processes, and each fixture's verdict.

Staff only (part of the kit's self-check). Runs each fixture of
fixtures/training_step on the tiny config: the honest plain-DDP entry is accepted
with a time; each cheat is refused by its own detector (and the reason names it). About 3 s a
fixture on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import materialize
from fixtures.training_step import FIXTURES, get
from leaderboard.training_step.config import CONFIGS, OFFICIAL, ONE_GPU, TINY, TINY_BF16
from leaderboard.store import read_records
from leaderboard.training_step.__main__ import main
from leaderboard.training_step.run import run

KIT = Path(__file__).resolve().parents[2]
ENTRY = KIT / "reference"  # the reference solution, whose §3.8 TrainingStep is the staff entry


@pytest.mark.parametrize("fixture", [f.name for f in FIXTURES])
def test_fixture_gets_its_verdict(fixture, tmp_path):
    detector = get(fixture).verdict.refused_by
    outcome = run(materialize(get(fixture), tmp_path / fixture), TINY)
    if not detector:
        assert outcome.accepted, f"{fixture} must be accepted; refused: {outcome.reasons}"
        assert outcome.median_ms is not None and outcome.median_ms > 0
        assert [len(t) for t in outcome.times_ms] == [TINY.rep_calls] * TINY.world_size
    else:
        assert not outcome.accepted, f"{fixture} must be refused by {detector}; it was accepted"
        named = [reason for reason in outcome.reasons if reason.startswith(detector)]
        assert named, f"{fixture} must be refused by {detector}; the reasons were {outcome.reasons}"


@pytest.mark.parametrize("config", [TINY, TINY_BF16], ids=lambda c: c.name)
def test_the_staff_entry_is_accepted(config):
    """FSDP2, checkpointed blocks, fused attention and a chunked head with its loss pass the gate."""
    outcome = run(ENTRY, config)
    assert outcome.accepted, f"the staff entry must be accepted on {config.name}; refused: {outcome.reasons}"


@pytest.mark.parametrize(("fixture", "accepted"), [("honest_plain_ddp", True), ("cheat_different_model", False),
                                                   ("cheat_no_update", False)])
def test_the_16_bit_gate(fixture, accepted, tmp_path):
    """bf16: the updates are compared in norm; an honest step passes, a different model's updates do not."""
    outcome = run(materialize(get(fixture), tmp_path / fixture), TINY_BF16)
    assert outcome.accepted == accepted, (fixture, outcome.reasons)
    if not accepted:
        assert any(reason.startswith("gate") for reason in outcome.reasons), outcome.reasons


def test_a_crash_is_refused_with_its_error(tmp_path):
    (tmp_path / "cs336_systems").mkdir()
    (tmp_path / "cs336_systems" / "__init__.py").write_text("")
    (tmp_path / "adapters.py").write_text(
        "def get_training_step(model, optimizer_settings, compute_dtype):\n"
        "    raise RuntimeError('out of memory, pretend')\n")
    outcome = run(tmp_path, TINY)
    assert not outcome.accepted and any("crash" in r and "pretend" in r for r in outcome.reasons), outcome.reasons


def test_a_directory_without_adapters_is_not_a_submission(tmp_path):
    with pytest.raises(FileNotFoundError, match="no adapters.py"):
        run(tmp_path, TINY)


def test_the_official_config_is_cs336_2026s():
    assert (OFFICIAL.d_model, OFFICIAL.d_ff, OFFICIAL.num_layers, OFFICIAL.num_heads, OFFICIAL.vocab_size) == (
        4096, 11008, 34, 32, 151936)
    assert (OFFICIAL.batch_size, OFFICIAL.context_length, OFFICIAL.compute_dtype, OFFICIAL.world_size) == (
        2, 32768, "bfloat16", 2)
    assert OFFICIAL.time_limit_s == 600


def test_the_cli_cpu_run_records_the_run_with_its_stack(tmp_path, capsys):
    store = tmp_path / "records.jsonl"
    submission = materialize(get("cheat_no_update"), tmp_path / "cheat_no_update")
    status = main(["run", str(submission), "--cpu", "--name", "cheater", "--store", str(store)])
    assert status == 1 and "no_update" in capsys.readouterr().out
    [entry] = read_records(store)
    assert entry["name"] == "cheater" and not entry["accepted"] and entry["mode"] == "tiny"
    assert any(reason.startswith("no_update") for reason in entry["refusals"])
    assert entry["stack"]["backend"] == "gloo" and entry["stack"]["torch"] and entry["time_ms"] is None


def test_the_cli_accepts_the_reference_on_the_cpu(tmp_path):
    """The README's student command, as a student runs it: ``python -m leaderboard.training_step run
    reference --cpu`` accepts the reference's §3.8 step, prints its time and records it."""
    store = tmp_path / "records.jsonl"
    done = subprocess.run([sys.executable, "-m", "leaderboard.training_step", "run", "reference", "--cpu",
                           "--store", str(store)], cwd=KIT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, (done.stdout + done.stderr)[-3000:])
    assert re.match(r"accepted: [\d.]+ ms a step \(median, slowest rank; tiny, gloo", done.stdout), done.stdout
    [entry] = read_records(store)
    assert entry["accepted"] and entry["name"] == "reference" and entry["refusals"] == [] and entry["time_ms"] > 0


def test_the_one_gpu_runs_settings_accept_the_reference_on_a_world_of_one():
    """What ``--one-gpu`` runs, as far as a CPU can: its config (one rank, bf16, its gate and
    tolerances) at the tiny shape, with gloo: FSDP over a world of one passes the gate, and the
    communication rules, which need two ranks, do not refuse it."""
    shape = {name: getattr(TINY_BF16, name) for name in ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size",
                                                          "context_length")}
    config = dataclasses.replace(ONE_GPU, name="one_gpu_on_cpu", time_limit_s=120.0, **shape)
    assert (config.world_size, config.compute_dtype, CONFIGS["one_gpu"].trusted_fits) == (1, "bfloat16", True)
    outcome = run(ENTRY, config)
    assert outcome.accepted, f"the staff entry must be accepted on one rank; refused: {outcome.reasons}"
    assert [len(t) for t in outcome.times_ms] == [config.rep_calls]


def test_the_one_gpu_run_without_a_gpu_says_so_and_records_nothing(tmp_path, monkeypatch, capsys):
    from harness import gpus

    monkeypatch.setattr(gpus, "count", lambda: 0)
    store = tmp_path / "training_step_one_gpu.jsonl"
    assert main(["run", str(ENTRY), "--one-gpu", "--name", "staff-1gpu", "--store", str(store)]) == 2
    assert "needs 1 CUDA GPU(s); use --cpu on a CPU" in capsys.readouterr().err and not store.exists()
