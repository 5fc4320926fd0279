"""The grader packs test files into process chains by expected duration (autograder/schedule.py).

Synthetic tables and files in a temporary kit, so each check is exact and takes milliseconds:
longest-first packing balances what size balancing would not, unknown files are estimated
from their size, suites never share a chain, chains are only added where they shorten the
grade, chains run ``jobs`` at a time in the planned order, and the GPU default of chains at a time follows the CPU count and the GPU memory.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autograder import chains as chains_module
from autograder import grade as grade_module
from autograder.runner import SuiteRun, SuiteSpec
from autograder.schedule import (
    DURATIONS_PATH, DurationsError, FileTiming, expected_seconds, load_durations, pack_longest_first, plan_chains,
)
from tests.harness.gpus import ListedGPU

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


def test_longest_first_balances_durations_that_sizes_do_not_predict(tmp_path):
    # Sizes are the reverse of durations: balancing sizes puts 7 + 5 s in one chain and 4+3+3+2 s in the other.
    seconds = {"test_a.py": 7, "test_b.py": 5, "test_c.py": 4, "test_d.py": 3, "test_e.py": 3, "test_f.py": 2}
    sizes = {"test_a.py": 100, "test_b.py": 200, "test_c.py": 300, "test_d.py": 400, "test_e.py": 500, "test_f.py": 600}
    paths = make_files(tmp_path, "tests", sizes)
    table = {f"tests/{name}": FileTiming(cpu=value) for name, value in seconds.items()}
    chains = plan_chains({"visible": paths}, 2, tmp_path, gpu=False, durations=table)
    assert loads(chains) == [12.0, 12.0], [(c.files, c.expected_s) for c in chains]
    assert sorted(p.name for c in chains for p in c.files) == sorted(seconds), "every file runs exactly once"


def test_pack_longest_first_is_lpt():
    costs = {Path(name): value for name, value in {"a": 3, "b": 3, "c": 2, "d": 2, "e": 2}.items()}
    groups = pack_longest_first(costs, 2)
    assert sorted(sum(costs[p] for p in group) for group in groups) == [5, 7]  # LPT's answer (the best is 6 + 6)
    assert pack_longest_first(costs, 9) == [[p] for p in sorted(costs, key=lambda p: (-costs[p], p.as_posix()))]


def test_unknown_files_are_estimated_from_their_size(tmp_path):
    known, unknown = make_files(tmp_path, "tests", {"test_known.py": 1000, "test_new.py": 3000})
    table = {"tests/test_known.py": FileTiming(cpu=10.0, gpu=40.0)}
    assert expected_seconds([known, unknown], tmp_path, table, "cpu") == {known: 10.0, unknown: pytest.approx(30.0)}
    assert expected_seconds([known, unknown], tmp_path, table, "gpu") == {known: 40.0, unknown: pytest.approx(120.0)}
    assert expected_seconds([known, unknown], tmp_path, {}, "cpu") == {known: 1000.0, unknown: 3000.0}
    only_cpu = {"tests/test_known.py": FileTiming(cpu=10.0)}  # no gpu number: the file counts as unknown there
    assert expected_seconds([known, unknown], tmp_path, only_cpu, "gpu") == {known: 1000.0, unknown: 3000.0}


def test_suites_never_share_a_chain_and_each_gets_one(tmp_path):
    visible = make_files(tmp_path, "tests", {"test_a.py": 10, "test_b.py": 10})
    hidden = make_files(tmp_path, "hidden", {"test_a_hidden.py": 10, "test_b_hidden.py": 10})
    for jobs in (1, 2, 4):
        chains = plan_chains({"visible": visible, "hidden": hidden}, jobs, tmp_path, gpu=False, durations={})
        assert {chain.suite for chain in chains} == {"visible", "hidden"}
        for chain in chains:
            folder = "tests" if chain.suite == "visible" else "hidden"
            assert all(path.parent.name == folder for path in chain.files), (chain.suite, chain.files)
        for suite in ("visible", "hidden"):
            indexes = [chain.index for chain in chains if chain.suite == suite]
            assert sorted(indexes) == list(range(len(indexes))), "a suite's chains are numbered 0, 1, ..."


def test_chains_go_to_the_slowest_suite_and_only_where_they_help(tmp_path):
    visible = make_files(tmp_path, "tests", {"test_one.py": 1})
    hidden = make_files(tmp_path, "hidden", {"test_x.py": 1, "test_y.py": 1, "test_z.py": 1})
    table = {"tests/test_one.py": FileTiming(cpu=10.0)} | {f"hidden/{n}": FileTiming(cpu=6.0) for n in
                                                          ("test_x.py", "test_y.py", "test_z.py")}
    for jobs in (4, 8):
        chains = plan_chains({"visible": visible, "hidden": hidden}, jobs, tmp_path, gpu=False, durations=table)
        assert sorted(chain.suite for chain in chains) == ["hidden"] * 3 + ["visible"], (jobs, chains)
        assert [chain.expected_s for chain in chains] == [10.0, 6.0, 6.0, 6.0], "longest chain starts first"
    chains = plan_chains({"visible": visible, "hidden": hidden}, 3, tmp_path, gpu=False, durations=table)
    assert loads(chains) == [6.0, 10.0, 12.0], "with 3 at a time the hidden suite gets the second chain"
    table["tests/test_one.py"], table["hidden/test_x.py"] = FileTiming(cpu=3.0), FileTiming(cpu=10.0)
    table["hidden/test_y.py"] = table["hidden/test_z.py"] = FileTiming(cpu=1.0)
    chains = plan_chains({"visible": visible, "hidden": hidden}, 8, tmp_path, gpu=False, durations=table)
    assert loads(chains) == [2.0, 3.0, 10.0], "a third hidden chain would not shorten the grade: not started"


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
        (True, 16, 140.4, 8), (True, 16, 80.0, 5), (True, 16, 40.0, 2), (True, 16, None, 2),
        (True, 8, 140.4, 4), (True, 2, 140.4, 2), (True, 1, 140.4, 1), (True, 128, 1000.0, 8),
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
        ('"tests/test_a.py" = { cpu = 1, shards = 0 }', ["shards", "0"]),
        ('"tests/test_a.py" = { cpu = 1, shards = 1.5 }', ["shards", "1.5"]),
        ('"tests/test_a.py" = { cpu = 1, shards = true }', ["shards", "True"]),
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


def test_the_kit_gpu_plan_is_within_the_packing_bound():
    files = {suite: sorted(p for p in (KIT / folder).glob("test_*.py") if p.name != "test_provided_model.py")
             for suite, folder in grade_module.SUITE_DIRS.items()}
    table = load_durations(DURATIONS_PATH)
    together = chains = plan_chains(files, 8, KIT, gpu=True, durations=table)
    timing = {p: table[p.relative_to(KIT).as_posix()] for c in together for p in c.files}
    longest_part = max(t.gpu / t.shards for t in timing.values())
    total = sum(t.gpu for t in timing.values())
    # Longest-first packing is within 4/3 of the best plan, which is never shorter than the
    # longest part or an even share of the work.
    bound = 4 / 3 * max(longest_part, total / len(together))
    assert max(chain.expected_s for chain in together) <= bound, [(c.suite, c.expected_s) for c in chains]
    assert len(together) <= 8


def test_chain_times_line_pairs_each_chain_with_its_own_run(tmp_path):
    a, b = make_files(tmp_path, "tests", {"test_a.py": 1, "test_b.py": 1})
    chains = plan_chains({"visible": [a, b]}, 2, tmp_path, gpu=False,
                         durations={"tests/test_a.py": FileTiming(cpu=9.0), "tests/test_b.py": FileTiming(cpu=3.0)})
    specs = [SuiteSpec(name=chain.suite, files=chain.files, submission=tmp_path, workdir=tmp_path, private_dir=tmp_path,
                       problem_of=str, test_timeout_s=1, deadline=0, shard=chain.index, kit=tmp_path) for chain in chains]
    runs = [SuiteRun("visible", wall_s=2.0, files=["tests/test_b.py"], shard=1),
            SuiteRun("visible", wall_s=11.0, files=["tests/test_a.py"], shard=0)]
    line = chains_module.chain_times(chains, specs, runs)
    assert line == ("grade: chain times: visible#0 11 s (expected 9): test_a.py; "
                    "visible#1 2 s (expected 3): test_b.py"), line


def test_a_file_with_shards_is_split_across_chains_and_each_part_runs_once(tmp_path):
    big, a, b = make_files(tmp_path, "tests", {"test_big.py": 1, "test_a.py": 1, "test_b.py": 1})
    table = {"tests/test_big.py": FileTiming(gpu=90.0, shards=3), "tests/test_a.py": FileTiming(gpu=30.0),
             "tests/test_b.py": FileTiming(gpu=30.0)}
    chains = plan_chains({"visible": [big, a, b]}, 5, tmp_path, gpu=True, durations=table)
    assert loads(chains) == [30.0] * 5, [(c.files, c.shards, c.expected_s) for c in chains]
    parts = sorted(k for chain in chains if big in chain.files for k in chain.shards[big][0])
    assert parts == [0, 1, 2], "each third of test_big.py runs in exactly one chain"
    assert all(chain.shards[big][1] == 3 for chain in chains if big in chain.files)
    assert not any(a in chain.shards or b in chain.shards for chain in chains), "files without shards are whole"


def test_a_chain_holding_every_part_of_a_file_runs_it_whole(tmp_path):
    big, a = make_files(tmp_path, "tests", {"test_big.py": 1, "test_a.py": 1})
    table = {"tests/test_big.py": FileTiming(cpu=90.0, shards=3), "tests/test_a.py": FileTiming(cpu=30.0)}
    (chain,) = plan_chains({"visible": [big, a]}, 1, tmp_path, gpu=False, durations=table)
    assert chain.files == [a, big] and chain.shards == {} and chain.expected_s == pytest.approx(120.0)
    two = plan_chains({"visible": [big, a]}, 2, tmp_path, gpu=False, durations=table)
    assert loads(two) == [60.0, 60.0]
    held = [chain.shards.get(big) for chain in two]
    assert sorted(len(parts) for parts, _ in held) == [1, 2], held


def test_the_test_process_keeps_only_its_parts_of_a_split_file(tmp_path):
    from types import SimpleNamespace

    from autograder.pytest_plugin import GraderPlugin, load_selection

    selection = tmp_path / "selection.json"
    selection.write_text('{"nodeids": null, "shards": {"tests/test_big.py": [[0, 2], 3]}}')
    nodeids, shards = load_selection(str(selection))
    plugin = GraderPlugin(key_fd=-1, record_fd=-1, run_only=nodeids, shards=shards)
    items = [SimpleNamespace(nodeid=f"tests/test_big.py::test_{i}") for i in range(7)]
    items += [SimpleNamespace(nodeid=f"tests/test_a.py::test_{i}") for i in range(2)]
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    plugin.pytest_collection_modifyitems(None, config, items)
    assert [item.nodeid for item in items] == [
        "tests/test_big.py::test_0", "tests/test_big.py::test_2", "tests/test_big.py::test_3",
        "tests/test_big.py::test_5", "tests/test_big.py::test_6", "tests/test_a.py::test_0", "tests/test_a.py::test_1"]
    assert [item.nodeid for item in deselected] == ["tests/test_big.py::test_1", "tests/test_big.py::test_4"]


def test_a_grade_runs_each_part_of_a_split_file_in_its_own_process(monkeypatch, tmp_path, capsys):
    import json

    from autograder.selftests.toy_kit import build_toy_kit

    kit, submission, manifest = build_toy_kit(tmp_path)
    table = {"autograder/hidden_tests/test_gamma_hidden.py": FileTiming(cpu=10.0, gpu=10.0, shards=2)}
    monkeypatch.setattr(grade_module, "load_durations", lambda: table)
    monkeypatch.setattr(grade_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(chains_module, "usable_cpus", lambda: 2)
    chain_runs = []  # each chain's own verdicts, before the grade merges them
    merge = chains_module.merge
    monkeypatch.setattr(grade_module, "merge", lambda runs: (chain_runs.extend(runs), merge(runs))[1])
    report = grade_module.grade(grade_module.GradeOptions(
        submission=submission, out=tmp_path / "out", kit=kit, manifest=manifest, jobs=2, problems=["gamma"]))
    printed = capsys.readouterr().out
    assert "test_gamma_hidden.py (part 1 of 2)" in printed and "test_gamma_hidden.py (part 2 of 2)" in printed, printed
    names = [entry["name"] for entry in json.loads((tmp_path / "out" / "results.json").read_text())["tests"]]
    gamma = sorted(name.rsplit("::", 1)[1] for name in names if "gamma" in name)
    assert gamma == ["test_gamma_four", "test_gamma_one", "test_gamma_three", "test_gamma_two"], names
    ran = [sorted(nodeid.rsplit("::", 1)[1] for nodeid in run.outcomes) for run in chain_runs if run.outcomes]
    assert len(ran) == 2 and sorted(ran[0] + ran[1]) == gamma, f"each test must run in exactly one part: {ran}"
    # The toy gamma() exits its process: every test of the file ran, in one of the two parts, and
    # each got that verdict of its own (two crashes per part: below the crash-streak limit of 3).
    outputs = {test["name"]: test.get("output", "") for test in report.results["tests"]}
    assert all("status 3" in output for output in outputs.values()), outputs
