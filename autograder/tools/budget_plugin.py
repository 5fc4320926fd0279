"""A pytest plugin for autograder/tools/student_budget.py: each test's CPU time, written as JSON.

Loaded with ``-p autograder.tools.budget_plugin`` and ``$CS336_BUDGET_CPU_JSON`` naming the output
file. CPU time (this process and the children it waited for, setup to teardown) hardly depends
on what else the machine runs, unlike wall time; it prints nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

_CPU: dict[str, float] = {}


def _cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _cpu_s()
    try:
        return (yield)
    finally:
        _CPU[item.nodeid] = _cpu_s() - start


def pytest_sessionfinish(session):
    path = os.environ.get("CS336_BUDGET_CPU_JSON")
    if path:
        with open(path, "w") as handle:
            json.dump(_CPU, handle)
