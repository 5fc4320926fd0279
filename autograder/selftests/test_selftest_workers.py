"""Plain ``pytest`` in the kit runs the selftest files two at a time, and only plain ``pytest``.

The hook is ``pytest_cmdline_main`` of autograder/selftests/conftest.py. It must turn on
``-n 2 --dist loadfile`` when pytest-xdist is there and the run names no paths and no ``-n``, and
leave every other run as it was asked: paths named, ``-n`` or ``--dist`` given, no xdist, and in
xdist's own workers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autograder.selftests.conftest import WORKERS, pytest_cmdline_main

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
