"""The attack fixtures against a real parent, as root: the worker drops to a sandbox uid, and the
kit and the store come out byte-for-byte unchanged.

The parent runs in a copy of the kit (a temporary directory every user may read, as a kit
usually is), so that the attacks have a kit and a store to find and nothing else edits them
meanwhile. One parent process runs the three attack fixtures at once (each on its own uid) with
``--store`` on its command line, where ``attack_store`` looks first. The attacks report what
they found and what failed (``attack: ...`` lines), so each test knows its target was found.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from confine.identity import PRIVATE_DIRS
from fixtures import materialize
from fixtures.leaderboard import FIXTURES
from leaderboard.worker_setup import SHARED_PACKAGES
from leaderboard.store import ROOT

ATTACKS = [f for f in FIXTURES if f.verdict.attack]
# Judged only through a real parent as well: the cheats only its replay refuses, and the honest
# fixture, which the replay must accept.
REPLAYED = [f for f in FIXTURES if f.verdict.replayed or f.name == "honest_slow"]
THROUGH_A_PARENT = ATTACKS + REPLAYED
MARKER = b"planted by attack_kit"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops to a sandbox uid only when the parent is root")

DRIVER = """
import json, sys, threading
from pathlib import Path
from leaderboard.parent import run_submission
store = Path(sys.argv[sys.argv.index("--store") + 1])
names = sys.argv[1 : sys.argv.index("--store")]
records = {}
def one(name):
    records[name] = run_submission(Path("submissions") / name, name, "cpu", store=store)
threads = [threading.Thread(target=one, args=(name,)) for name in names]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(records))
"""


def kit_copy() -> Path:
    """What a parent needs of the kit, plus the files the attacks go for, readable by everyone."""
    # Outside /tmp: a worker has a /tmp of its own (confine/identity.py own_files), so a kit there
    # could not be found at all, and the attacks below must find it to show that finding is not enough.
    (ROOT / "build").mkdir(exist_ok=True)
    kit = Path(tempfile.mkdtemp(prefix="leaderboard-kit-", dir=ROOT / "build"))
    os.chmod(kit, 0o755)
    ignore = shutil.ignore_patterns("__pycache__", "results")
    shutil.copytree(ROOT / "leaderboard", kit / "leaderboard", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "confine", kit / "confine", symlinks=True, ignore=ignore)
    for fixture in THROUGH_A_PARENT:  # the submissions, inside the kit as a fixture folder is
        materialize(fixture, kit / "submissions" / fixture.name)
    # The worker's modules (leaderboard/ and confine/ whole, for the parent), and the parent's own.
    for relative in ("adapters.py", "autograder/__init__.py", "autograder/results.py"):
        (kit / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, kit / relative)
    for package in SHARED_PACKAGES:  # the worker's, and the replay process of the parent (leaderboard/replay.py)
        shutil.copytree(ROOT / package, kit / package, symlinks=True, ignore=ignore)
    return kit


def snapshot(kit: Path, skip: Path) -> dict[str, str]:
    """sha256 of every file under ``kit`` except ``skip`` (the store)."""
    found = {}
    for directory, _, names in os.walk(kit):
        for name in names:
            path = Path(directory) / name
            if path != skip and not path.is_symlink():
                found[str(path.relative_to(kit))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def attacked():
    """Run every attack fixture once; yield (kit, store, old store bytes, kit before, kit after,
    records by name, the parent's stderr)."""
    kit = kit_copy()
    store = kit / "records" / "leaderboard" / "records.jsonl"  # where the store is by default
    store.parent.mkdir(parents=True)
    other = {"name": "alice", "accepted": True, "refusals": [], "checks": {}, "mode": "official", "date": "2026-11-29", "submission_hash": "ab" * 32, "time_ms": 5.0}
    store.write_text(json.dumps(other, sort_keys=True) + "\n")
    old_store = store.read_bytes()
    before = snapshot(kit, store)
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, *[f.name for f in THROUGH_A_PARENT], "--store", str(store)],
            cwd=kit, capture_output=True, text=True, timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        yield kit, store, old_store, before, snapshot(kit, store), json.loads(done.stdout.splitlines()[-1]), done.stderr
    finally:
        shutil.rmtree(kit, ignore_errors=True)


def test_each_attack_gets_its_verdict(attacked):
    *_, records, err = attacked
    for fixture in THROUGH_A_PARENT:
        record = records[fixture.name]
        codes = [r["code"] for r in record["refusals"]]
        assert record["isolation"].startswith("uid "), record["isolation"]
        if fixture.verdict.cpu_refusals:
            assert set(fixture.verdict.cpu_refusals) <= set(codes), (fixture.name, record["refusals"])
        else:
            assert record["accepted"], (fixture.name, record["refusals"], err[-3000:])
    assert len({records[f.name]["isolation"] for f in THROUGH_A_PARENT}) == len(THROUGH_A_PARENT)  # one uid per concurrent run


def test_a_forged_report_is_refused_and_its_files_are_never_read(attacked):
    *_, records, err = attacked
    assert "attack: wrote a forged 'done' frame to fd" in err  # it did reach the pipe
    record = records["attack_forged_record"]
    assert not record["accepted"] and record.get("time_ms") is None
    assert "expected gate, got 'done'" in record["refusals"][0]["message"]


def _skip_where_workers_cannot_see_the_kit() -> None:
    """A kit checked out under a folder every worker replaces with its own (``PRIVATE_DIRS``: a
    clone in /tmp) is out of the attacks' sight, so they cannot show that finding it is not enough."""
    real = os.path.realpath(ROOT)
    hidden = [d for d in PRIVATE_DIRS if real.startswith(os.path.realpath(d) + "/")]
    if hidden:
        pytest.skip(f"the kit is checked out under {hidden[0]}, which every worker replaces with a private folder "
                    "of its own, so the attacks cannot find the kit to try it: clone the kit elsewhere to run this test")


def test_the_store_is_found_but_unchanged(attacked):
    _skip_where_workers_cannot_see_the_kit()
    kit, store, old_store, *_ = attacked
    err = attacked[-1]
    assert f"attack: store candidates: {store}" in err or str(store) in err.split("store candidates:")[1].splitlines()[0]
    assert f"attack: write to {store} failed: PermissionError" in err
    lines = store.read_bytes()
    assert lines.startswith(old_store)  # the other entry, byte for byte
    added = [json.loads(line) for line in lines[len(old_store) :].decode().splitlines()]
    assert sorted(r["name"] for r in added) == sorted(f.name for f in THROUGH_A_PARENT)  # only the parent's own appends


def test_the_kit_is_found_but_unchanged(attacked):
    _skip_where_workers_cannot_see_the_kit()
    kit, _, _, before, after, _, err = attacked
    assert f"attack: write to {kit}/autograder/results.py failed: PermissionError" in err
    assert f"attack: write to {kit}/leaderboard/parent.py failed: PermissionError" in err
    assert before == after  # every file, byte for byte; nothing added
    for path in (ROOT / "autograder" / "results.py", ROOT / "leaderboard" / "parent.py"):
        assert MARKER not in path.read_bytes()
    assert not [p for p in sys.path if p.endswith("-packages") and (Path(p) / "sitecustomize.py").exists()]
    assert not Path("/tmp/leaderboard-backdoor-ran").exists()
