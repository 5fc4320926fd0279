"""How a grade spreads its tests over process chains (autograder/schedule.py, autograder/test_pool.py).

Synthetic tables and files in a temporary kit, so each check is exact and takes milliseconds:
unknown files are estimated from their size, suites never share a chain, chains go to the suite
with the most expected seconds per chain, each chain starts at its share and takes only the tests
it claims first, chains run ``jobs`` at a time in the planned order, and the GPU default of chains at a time follows the CPU count and the GPU memory.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from autograder import chains as chains_module
from autograder import grade as grade_module
from autograder.watchdog import SuiteRun, SuiteSpec
from autograder.schedule import (DURATIONS_PATH, START_S, DurationsError, FileTiming, expected_seconds, load_durations,
                                 plan_chains)
from autograder.test_pool import Pool, rotated
from harness.gpus import ListedGPU

KIT = Path(__file__).resolve().parents[2]


def make_files(root: Path, suite_dir: str, sizes: dict[str, int]) -> list[Path]:
    folder = root / suite_dir
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, size in sizes.items():
        path = folder / name
        path.write_bytes(b"#" * size)
        paths.append(path)
    return paths


def loads(chains) -> list[float]:
    return sorted(round(chain.expected_s, 6) for chain in chains)


def test_unknown_files_are_estimated_from_their_size(tmp_path):
    known, unknown = make_files(tmp_path, "tests", {"test_known.py": 1000, "test_new.py": 3000})
    table = {"tests/test_known.py": FileTiming(cpu=10.0, gpu=40.0)}
    assert expected_seconds([known, unknown], tmp_path, table, "cpu") == {known: 10.0, unknown: pytest.approx(30.0)}
    assert expected_seconds([known, unknown], tmp_path, table, "gpu") == {known: 40.0, unknown: pytest.approx(120.0)}
    assert expected_seconds([known, unknown], tmp_path, {}, "cpu") == {known: 1000.0, unknown: 3000.0}
    only_cpu = {"tests/test_known.py": FileTiming(cpu=10.0)}  # no gpu number: the file counts as unknown there
    assert expected_seconds([known, unknown], tmp_path, only_cpu, "gpu") == {known: 1000.0, unknown: 3000.0}


def test_suites_never_share_a_chain_and_each_chain_of_a_suite_holds_all_its_files(tmp_path):
    visible = make_files(tmp_path, "tests", {"test_a.py": 10, "test_b.py": 10})
    hidden = make_files(tmp_path, "hidden", {"test_a_hidden.py": 10, "test_b_hidden.py": 10})
    for jobs in (1, 2, 4, 7):
        chains = plan_chains({"visible": visible, "hidden": hidden}, jobs, tmp_path, gpu=False, durations={}, min_work_s=0)
        assert {chain.suite for chain in chains} == {"visible", "hidden"} and len(chains) == max(2, jobs)
        for chain in chains:
            assert chain.files == (visible if chain.suite == "visible" else hidden), (chain.suite, chain.files)
        for suite in ("visible", "hidden"):
            ours = sorted((chain for chain in chains if chain.suite == suite), key=lambda chain: chain.index)
            assert [chain.index for chain in ours] == list(range(len(ours))), "a suite's chains are numbered 0, 1, ..."
            assert [chain.start for chain in ours] == [k / len(ours) for k in range(len(ours))], "even starting shares"


def test_chains_go_to_the_suite_with_the_most_seconds_per_chain(tmp_path):
    visible = make_files(tmp_path, "tests", {"test_one.py": 1})
    hidden = make_files(tmp_path, "hidden", {"test_x.py": 1, "test_y.py": 1, "test_z.py": 1})
    table = {"tests/test_one.py": FileTiming(cpu=10.0)} | {f"hidden/{n}": FileTiming(cpu=6.0) for n in
                                                          ("test_x.py", "test_y.py", "test_z.py")}
    chains = plan_chains({"visible": visible, "hidden": hidden}, 3, tmp_path, gpu=False, durations=table, min_work_s=0)
    assert [(chain.suite, chain.expected_s) for chain in chains] == [("visible", 10.0), ("hidden", 9.0), ("hidden", 9.0)]
    chains = plan_chains({"visible": visible, "hidden": hidden}, 5, tmp_path, gpu=False, durations=table, min_work_s=0)
    assert [(chain.suite, chain.expected_s) for chain in chains] == [
        ("hidden", 6.0), ("hidden", 6.0), ("hidden", 6.0), ("visible", 5.0), ("visible", 5.0)], "longest first"
    assert chains[0].weights == {path: 6.0 for path in hidden}


def test_a_further_chain_only_where_each_chain_keeps_two_starts_of_work(tmp_path):
    """A small grade runs in one chain whatever ``jobs`` is: a second would start a process (a fork,
    collection, the executor's torch import) for less work than that start. A large one still gets
    every chain ``jobs`` allows."""
    small = make_files(tmp_path, "tests", {"test_a.py": 1, "test_b.py": 1})
    table = {"tests/test_a.py": FileTiming(cpu=START_S + 4.0), "tests/test_b.py": FileTiming(cpu=START_S + 4.0)}
    assert len(plan_chains({"pooled": small}, 4, tmp_path, gpu=False, durations=table)) == 1, "8 s of work: one chain"
    table = {name: FileTiming(cpu=START_S + 5.0) for name in table}
    assert len(plan_chains({"pooled": small}, 4, tmp_path, gpu=False, durations=table)) == 2, "10 s: two chains of 5"
    table = {name: FileTiming(cpu=START_S + 100.0) for name in table}
    assert len(plan_chains({"pooled": small}, 4, tmp_path, gpu=False, durations=table)) == 4, "200 s: every job"
    assert len(plan_chains({"pooled": small}, 4, tmp_path, gpu=False, durations=table, min_work_s=150)) == 1


def test_chains_run_jobs_at_a_time_in_the_planned_order(monkeypatch, tmp_path):
    events = []
    lock = threading.Lock()

    def fake_run_suite(spec: SuiteSpec) -> SuiteRun:
        with lock:
            events.append(("start", spec.shard))
        time.sleep(0.05 if spec.shard == 0 else 0.01)
        with lock:
            events.append(("end", spec.shard))
        return SuiteRun(spec.name, shard=spec.shard)

    monkeypatch.setattr(chains_module, "run_suite", fake_run_suite)
    specs = [SuiteSpec(name="visible", files=[], submission=tmp_path, workdir=tmp_path, private_dir=tmp_path,
                       problem_of=str, test_timeout_s=1, deadline=0, shard=index) for index in range(5)]
    runs = chains_module.run_chains(specs, jobs=3)
    assert [run.shard for run in runs] == [0, 1, 2, 3, 4], "one run per chain, in the chains' order"
    assert {event[1] for event in events[:3]} == {0, 1, 2}, f"the first three chains start together: {events}"
    running = peak = 0
    for kind, _ in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 3, f"at most 3 chains at a time, and 3 when there are enough: {events}"


@pytest.mark.parametrize(
    ("gpu", "cpus", "memory_gib", "expected"),
    [
        (False, 16, None, 4), (False, 2, None, 2),
        (True, 16, 140.4, 16), (True, 16, 80.0, 10), (True, 16, 40.0, 5), (True, 16, 12.0, 2), (True, 16, None, 2),
        (True, 8, 140.4, 8), (True, 2, 140.4, 2), (True, 1, 140.4, 1), (True, 128, 1000.0, 16),
    ],
)
def test_default_jobs(monkeypatch, gpu, cpus, memory_gib, expected):
    listed = [] if memory_gib is None else [ListedGPU(0, "GPU", memory_gib * 1024), ListedGPU(1, "GPU", 2000.0 * 1024)]
    monkeypatch.setattr(grade_module.gpus, "driver_present", lambda: gpu)
    monkeypatch.setattr(grade_module.gpus, "listed", lambda: listed)  # the smallest GPU counts
    monkeypatch.setattr(chains_module, "usable_cpus", lambda: cpus)
    assert chains_module.default_jobs() == expected


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('"tests/test_a.py" = { cpu = -1 }', ["tests/test_a.py", "cpu", "-1"]),
        ('"tests/test_a.py" = { gpu = "fast" }', ["gpu", "fast"]),
        ('"tests/test_a.py" = { cpu = 1, alone_on_gpu = true }', ["alone_on_gpu", "@pytest.mark.alone_on_gpu"]),
        ('"tests/test_a.py" = { cpu = 1, gpus = 2 }', ["gpus"]),
        ('"tests/test_a.py" = 3', ["must be a table"]),
        ('"tests/test_a.py" = { cpu = 1, shards = 2 }', ["shards", "autograder/test_pool.py"]),
    ],
)
def test_bad_table_entries_are_named(tmp_path, entry, words):
    path = tmp_path / "durations.toml"
    path.write_text(f"[files]\n{entry}\n")
    with pytest.raises(DurationsError) as error:
        load_durations(path)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_the_kit_table_names_only_graded_test_files():
    table = load_durations(DURATIONS_PATH)
    assert table, "autograder/test_durations.toml has no [files] entries"
    missing = [name for name in table if not (KIT / name).is_file()]
    assert not missing, f"autograder/test_durations.toml names files that do not exist: {missing}"
    incomplete = [name for name, timing in table.items() if timing.cpu is None or timing.gpu is None]
    assert not incomplete, f"give these files both a cpu and a gpu number: {incomplete}"


def test_chain_times_line_pairs_each_chain_with_its_own_run_and_the_tests_it_ran(tmp_path):
    from autograder.watchdog import Verdict

    a, b = make_files(tmp_path, "tests", {"test_a.py": 1, "test_b.py": 1})
    chains = plan_chains({"visible": [a, b]}, 2, tmp_path, gpu=False, min_work_s=0,
                         durations={"tests/test_a.py": FileTiming(cpu=9.0), "tests/test_b.py": FileTiming(cpu=3.0)})
    specs = [SuiteSpec(name=chain.suite, files=chain.files, submission=tmp_path, workdir=tmp_path, private_dir=tmp_path,
                       problem_of=str, test_timeout_s=1, deadline=0, shard=chain.index, kit=tmp_path) for chain in chains]
    ran = {nodeid: Verdict(nodeid, "passed") for nodeid in ("tests/test_a.py::t1", "tests/test_a.py::t2",
                                                             "tests/test_b.py::t1")}
    runs = [SuiteRun("visible", {"tests/test_b.py::t2": Verdict("tests/test_b.py::t2", "passed")}, wall_s=2.0, shard=1),
            SuiteRun("visible", ran, wall_s=11.0, shard=0)]
    line = chains_module.chain_times(chains, specs, runs)
    assert line == ("grade: chain times: visible#0 11 s (expected 6): test_a.py x2, test_b.py x1; "
                    "visible#1 2 s (expected 6): test_b.py x1"), line


def test_a_chain_starts_at_its_share_of_the_expected_seconds_and_goes_round():
    nodeids = [f"tests/test_big.py::t{i}" for i in range(4)] + [f"tests/test_small.py::t{i}" for i in range(4)]
    weights = {"tests/test_big.py": 12.0, "tests/test_small.py": 4.0}  # 3 s and 1 s a test
    assert rotated(nodeids, weights, 0.0) == list(range(8))
    assert rotated(nodeids, weights, 0.5) == [3, 4, 5, 6, 7, 0, 1, 2], "8 of 16 s are done after 3 tests of 3 s"
    assert rotated(nodeids, weights, 0.75) == [4, 5, 6, 7, 0, 1, 2, 3]
    assert rotated(nodeids, {}, 0.5) == [4, 5, 6, 7, 0, 1, 2, 3], "files without an estimate count 1 s each"
    assert rotated([], weights, 0.5) == []


def test_only_the_first_chain_to_claim_a_test_has_it_and_keeps_it_across_its_processes(tmp_path):
    ours, theirs = Pool(tmp_path, "hidden#0"), Pool(tmp_path, "hidden#1")
    assert ours.claim("tests/test_a.py::t") is True
    assert theirs.claim("tests/test_a.py::t") is False
    assert ours.claim("tests/test_a.py::t") is True, "a chain's next test process may run what it claimed"
    assert theirs.claim("tests/test_a.py::u") is True and ours.claim("tests/test_a.py::u") is False


def test_the_test_process_starts_at_its_point_and_runs_only_what_it_claims(tmp_path):
    from types import SimpleNamespace

    from autograder.pytest_plugin import GraderPlugin, load_selection

    claims = tmp_path / "claims"
    claims.mkdir()
    selection = tmp_path / "selection.json"
    pool = Pool(claims, "visible#1", 0.5, {"tests/test_a.py": 1.0, "tests/test_b.py": 1.0})
    selection.write_text(json.dumps({"nodeids": None, "pool": pool.as_json()}))
    nodeids, loaded = load_selection(str(selection))
    assert nodeids is None and loaded == pool
    plugin = GraderPlugin(key_fd=-1, record_fd=-1, run_only=None, pool=loaded)
    sent, ran = [], []
    plugin._signer = SimpleNamespace(send=sent.append)
    hook = SimpleNamespace(pytest_runtest_protocol=lambda item, nextitem: ran.append(item.nodeid),
                           pytest_deselected=lambda items: None)
    config = SimpleNamespace(hook=hook, option=SimpleNamespace(collectonly=False))
    items = [SimpleNamespace(nodeid=f"tests/test_{f}.py::t{i}", config=config) for f in "ab" for i in range(2)]
    plugin.pytest_collection_modifyitems(None, config, items)
    assert [item.nodeid for item in items] == ["tests/test_b.py::t0", "tests/test_b.py::t1", "tests/test_a.py::t0",
                                               "tests/test_a.py::t1"]
    assert Pool(claims, "visible#0").claim("tests/test_a.py::t0")  # another chain of the suite took this one
    session = SimpleNamespace(items=items, config=config, testsfailed=0, shouldfail=False, shouldstop=False)
    assert plugin.pytest_runtestloop(session) is True
    assert ran == ["tests/test_b.py::t0", "tests/test_b.py::t1", "tests/test_a.py::t1"]
    assert sent == [{"type": "elsewhere", "nodeid": "tests/test_a.py::t0"}]


def test_a_grade_runs_each_test_once_across_its_chains(monkeypatch, tmp_path, capsys):
    import json

    from autograder.selftests.toy_kit import build_toy_kit

    kit, submission, manifest = build_toy_kit(tmp_path)
    table = {"autograder/hidden_tests/test_gamma_hidden.py": FileTiming(cpu=30.0, gpu=30.0)}  # work for 2 chains
    monkeypatch.setattr(grade_module, "load_durations", lambda: table)
    monkeypatch.setattr(grade_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(chains_module, "usable_cpus", lambda: 2)
    chain_runs = []  # each chain's own verdicts, before the grade merges them
    merge = chains_module.merge
    monkeypatch.setattr(grade_module, "merge", lambda runs: (chain_runs.extend(runs), merge(runs))[1])
    report = grade_module.grade(grade_module.GradeOptions(
        submission=submission, out=tmp_path / "out", kit=kit, manifest=manifest, jobs=2, problems=["gamma"]))
    printed = (tmp_path / "out" / "grade.log").read_text()  # the chain times: staff diagnostics, not the console
    assert "tests#0" in printed and "tests#1" in printed, printed  # the chains pool both suites
    names = [entry["name"] for entry in json.loads((tmp_path / "out" / "results.json").read_text())["tests"]]
    gamma = sorted(name.rsplit("::", 1)[1] for name in names if "gamma" in name)
    assert gamma == ["test_gamma_four", "test_gamma_one", "test_gamma_three", "test_gamma_two"], names
    ran = [sorted(nodeid.rsplit("::", 1)[1] for nodeid in run.outcomes) for run in chain_runs if run.outcomes]
    assert len(ran) == 2 and sorted(ran[0] + ran[1]) == gamma, f"each test must run in exactly one chain: {ran}"
    # The toy gamma() exits its process: every test of the file ran, in one of the two chains, and
    # each got that verdict of its own (the crash streak of 3 is never reached in either chain).
    outputs = {test["name"]: test.get("output", "") for test in report.results["tests"]}
    assert all("status 3" in output for output in outputs.values()), outputs


MODULE_A = '''
import time
import pytest


@pytest.fixture(scope="module")
def opened():
    yield "open"  # a module-scoped fixture: pytest must tear this module down before another's tests


@pytest.mark.parametrize("k", range(8))
def test_a(opened, k):
    assert opened == "open"
    time.sleep(0.5)
'''

MODULE_B = '''
import time
import pytest


@pytest.mark.parametrize("k", range(8))
def test_b(k):
    time.sleep(1.0)
'''


def test_a_chain_that_meets_tests_claimed_elsewhere_moves_on_to_the_next_file_cleanly(monkeypatch, tmp_path):
    from autograder.selftests.toy_kit import build_toy_kit

    kit, submission, manifest = build_toy_kit(tmp_path)
    hidden = kit / "autograder" / "hidden_tests"
    (hidden / "test_beta_hidden.py").write_text(MODULE_A)
    (hidden / "test_beta_more_hidden.py").write_text(MODULE_B)
    # The second chain starts at test_a[5] (10 s a test there by the table, 0.5 s in the other file):
    # the first runs test_a[0-4], finds the rest of its file taken, and goes on to a test_b that the
    # second has not reached.
    table = {"autograder/hidden_tests/test_beta_hidden.py": FileTiming(cpu=80.0, gpu=80.0),
             "autograder/hidden_tests/test_beta_more_hidden.py": FileTiming(cpu=4.0, gpu=4.0)}  # 84 s: 42 after a[4]
    monkeypatch.setattr(grade_module, "load_durations", lambda: table)
    monkeypatch.setattr(grade_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(chains_module, "usable_cpus", lambda: 2)
    chain_runs = []
    merge = chains_module.merge
    monkeypatch.setattr(grade_module, "merge", lambda runs: (chain_runs.extend(runs), merge(runs))[1])
    report = grade_module.grade(grade_module.GradeOptions(
        submission=submission, out=tmp_path / "out", kit=kit, manifest=manifest, jobs=2, problems=["beta"], quiet=True))
    statuses = {test["name"].rsplit("::", 1)[1]: (test["status"], test.get("output", "")[:200])
                for test in report.results["tests"]}
    assert len(statuses) == 16 and all(status == "passed" for status, _ in statuses.values()), statuses
    ran = [nodeid for run in chain_runs for nodeid in run.outcomes]
    assert len(ran) == len(set(ran)) == 16, f"each test runs in exactly one chain: {ran}"
    firsts = sorted(next(iter(run.outcomes)).rsplit("::", 1)[1] for run in chain_runs)
    assert firsts == ["test_a[0]", "test_a[5]"], f"the chains start at their shares of the table's seconds: {firsts}"
    assert all(run.restarts == 0 for run in chain_runs), [run.restarts for run in chain_runs]


def test_a_test_no_chain_gave_a_verdict_fails_when_the_chains_merge():
    from autograder.watchdog import Verdict

    suite = ["tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_a.py::t3"]
    first = SuiteRun("visible", {suite[0]: Verdict(suite[0], "passed")}, shard=0, collected=list(suite))
    second = SuiteRun("visible", {suite[1]: Verdict(suite[1], "passed")}, shard=1, collected=list(suite))
    (merged,) = chains_module.merge([first, second])
    assert [merged.outcomes[nodeid].status for nodeid in suite] == ["passed", "passed", "failed"]
    assert merged.outcomes[suite[2]].message == chains_module.UNRUN



def test_merge_splits_pooled_chains_by_each_tests_suite():
    """A chain runs tests of both suites; what it reports is split back by each test's path, so a
    hidden test is scored (and redacted) as hidden whichever chain ran it, a chain's restarts count
    once, and a test some chain collected but none gave a verdict still fails."""
    from autograder.watchdog import Verdict

    hidden, visible = "autograder/hidden_tests/test_a_hidden.py::t", "tests/test_a.py::t"
    runs = [SuiteRun("tests", {hidden + "1": Verdict(hidden + "1", "passed"), visible + "1": Verdict(visible + "1", "failed")},
                     restarts=2, shard=0, collected=[hidden + "1", hidden + "2", visible + "1"]),
            SuiteRun("tests", {visible + "2": Verdict(visible + "2", "passed")}, shard=1,
                     collect_errors=[("autograder/hidden_tests/test_b_hidden.py", "SyntaxError")])]
    merged = {run.name: run for run in chains_module.merge(runs)}
    assert set(merged) == {"hidden", "visible"}, merged
    assert set(merged["hidden"].outcomes) == {hidden + "1", hidden + "2"}
    assert merged["hidden"].outcomes[hidden + "2"].message == chains_module.UNRUN
    assert set(merged["visible"].outcomes) == {visible + "1", visible + "2"}
    assert merged["hidden"].collect_errors == [("autograder/hidden_tests/test_b_hidden.py", "SyntaxError")]
    assert merged["visible"].collect_errors == []
    assert sum(run.restarts for run in merged.values()) == 2
