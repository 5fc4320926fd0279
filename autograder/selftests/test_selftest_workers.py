"""Plain ``pytest`` in the kit runs the selftest files two at a time, and only plain ``pytest``;
the full grades that several files read are graded once all the same.

The hook is ``pytest_cmdline_main`` of autograder/selftests/conftest.py. It must turn on
``-n 2 --dist loadfile`` when pytest-xdist is there and the run names no paths and no ``-n``, and
leave every other run as it was asked: paths named, ``-n`` or ``--dist`` given, no xdist, and in
xdist's own workers. ``_once_per_run`` must run its maker once when two workers ask at once.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from autograder.selftests.conftest import WORKERS, _once_per_run, pytest_cmdline_main

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
