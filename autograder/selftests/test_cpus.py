"""autograder/cpus.py: the CPUs a grade may use come from its affinity and cgroup quota, not the host."""

from __future__ import annotations

import os

from autograder.cpus import cgroup_cpu_limit, usable_cpus


def _cgroup(tmp_path, text: str, sub: str = "grader"):
    (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    (tmp_path / sub / "cpu.max").write_text(text)
    return f"0::/{sub}\n"


def test_a_cgroup_v2_quota_caps_the_count(tmp_path):
    line = _cgroup(tmp_path, "150000 100000\n")
    assert cgroup_cpu_limit(tmp_path, line) == 1.5
    assert usable_cpus(tmp_path, line) == min(2, len(os.sched_getaffinity(0)))


def test_no_quota_leaves_the_affinity(tmp_path):
    line = _cgroup(tmp_path, "max 100000\n")
    assert cgroup_cpu_limit(tmp_path, line) is None
    assert usable_cpus(tmp_path, line) == len(os.sched_getaffinity(0))


def test_a_parents_quota_counts_and_v1_is_read(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    (tmp_path / "job" / "step").mkdir(parents=True)
    (tmp_path / "job" / "step" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path, "0::/job/step\n") == 1.0
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(v1, "4:cpu:/\n") == 3.0


def test_the_affinity_mask_counts_not_the_hosts_cpus(tmp_path):
    allowed = os.sched_getaffinity(0)
    one = {min(allowed)}
    os.sched_setaffinity(0, one)
    try:
        assert usable_cpus(tmp_path, "") == 1
    finally:
        os.sched_setaffinity(0, allowed)
