"""Plain ``pytest`` in the kit runs the selftest files two at a time, and only plain ``pytest``;
the full grades that several files read are graded once all the same.

The hook is ``pytest_cmdline_main`` of autograder/selftests/conftest.py. It must turn on
``-n 2 --dist loadfile`` when pytest-xdist is there and the run names no paths and no ``-n``, and
leave every other run as it was asked: paths named, ``-n`` or ``--dist`` given, no xdist, and in
xdist's own workers. Such a run hands out its files heaviest first (``HEAVIEST_FIRST``, which
must name files that exist), the rest in collection order, and its fixtures grade one submission
at a time (``side_by_side``). ``_once_per_run`` must run its maker once when two workers ask at once.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from autograder.selftests.conftest import (HEAVIEST_FIRST, KIT, WORKERS, _once_per_run, pytest_cmdline_main,
                                           pytest_collection_modifyitems, pytest_configure_node, side_by_side)

FROM_TESTPATHS = pytest.Config.ArgsSource.TESTPATHS


def _config(source=FROM_TESTPATHS, xdist=True, numprocesses=None, dist="no", worker=False):
    config = SimpleNamespace(args_source=source, option=SimpleNamespace(numprocesses=numprocesses, dist=dist),
                             pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "xdist"))
    if worker:
        config.workerinput = {"workerid": "gw0"}
    return config


def test_plain_pytest_runs_whole_files_two_at_a_time():
    config = _config()
    pytest_cmdline_main(config)
    assert (config.option.numprocesses, config.option.dist) == (WORKERS, "loadfile") and WORKERS == 2
    assert config.option.loadscopereorder is False, "xdist must hand out the files in collection order"


def test_the_heaviest_files_go_out_first_and_the_rest_as_collected():
    heavy = [HEAVIEST_FIRST[1], HEAVIEST_FIRST[0]]
    collected = ["leaderboard/tests/test_gate.py::t", f"{heavy[0]}::a", "autograder/selftests/test_cpus.py::t",
                 f"{heavy[1]}::a", f"{heavy[0]}::b"]
    plain = _config()
    pytest_cmdline_main(plain)
    told = {}
    for controller in (plain, _config(dist="loadfile")):  # plain pytest; pytest -n 2 --dist loadfile
        node = SimpleNamespace(config=controller, workerinput={"workerid": "gw0"})
        controller.option.loadscopereorder = getattr(controller.option, "loadscopereorder", True)  # xdist's default
        pytest_configure_node(node)
        told[controller is plain] = node.workerinput
    assert told[True]["heaviest_first"] is True and told[False]["heaviest_first"] is False
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in collected]
    pytest_collection_modifyitems(SimpleNamespace(workerinput=told[True]), items)
    assert [item.nodeid for item in items] == [f"{heavy[1]}::a", f"{heavy[0]}::a", f"{heavy[0]}::b",
                                               collected[0], collected[2]]  # the rest in collection order
    for config in (SimpleNamespace(), SimpleNamespace(workerinput=told[False])):  # not a worker; xdist's order
        items = [SimpleNamespace(nodeid=nodeid) for nodeid in collected]
        pytest_collection_modifyitems(config, items)
        assert [item.nodeid for item in items] == collected
    missing = [path for path in HEAVIEST_FIRST if not (KIT / path).is_file()]
    assert not missing and len(set(HEAVIEST_FIRST)) == len(HEAVIEST_FIRST), missing


def test_fixtures_grade_one_at_a_time_only_beside_another_file(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert side_by_side() == 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert side_by_side() == 1


@pytest.mark.parametrize("asked", [
    {"source": pytest.Config.ArgsSource.ARGS},  # pytest autograder/selftests/test_x.py
    {"xdist": False},  # pytest-xdist not installed, or -p no:xdist
    {"numprocesses": 4},  # pytest -n 4
    {"dist": "load"},  # pytest --dist load
    {"worker": True},  # inside one of xdist's workers
], ids=["paths", "no-xdist", "n-given", "dist-given", "worker"])
def test_any_other_run_is_left_as_asked(asked):
    config = _config(**asked)
    before = dict(vars(config.option))
    pytest_cmdline_main(config)
    assert vars(config.option) == before


def test_a_grade_two_workers_ask_for_at_once_is_made_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    (tmp_path / "popen-gw0").mkdir()
    factory = SimpleNamespace(getbasetemp=lambda: tmp_path / "popen-gw0")
    made, got = [], []

    def make():
        made.append(1)
        time.sleep(0.3)  # the other worker asks meanwhile
        return {"score": 74.56}

    workers = [threading.Thread(target=lambda: got.append(_once_per_run(factory, "grade", make))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(made) == 1 and got == [{"score": 74.56}] * 2, (made, got)
