"""The sandbox: leased uids, who owns what, the worker's environment, and the preflight checks."""

import os
import stat
from pathlib import Path

import pytest

from confine.views import blocked_directories, unreadable
from leaderboard.worker_setup import Identity, lease_uid, make_sandbox, remove_sandbox, worker_env, writable_paths

NOBODY = Identity(61999, 61999)
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="leasing uids and handing files to them needs root")


@root_only
def test_two_runs_never_share_a_uid():
    with lease_uid() as first, lease_uid() as second:
        assert first.isolated and second.isolated and first.uid != second.uid
    with lease_uid() as again:
        assert again.uid == first.uid  # released when the run ended


@root_only
def test_the_sandbox_gives_the_uid_only_its_work_directory():
    files = {"adapters.py": b"x = 1\n", "cs336_systems/__init__.py": b""}
    with lease_uid() as identity:
        dirs = make_sandbox(files, identity)
        try:
            assert (dirs.submission / "adapters.py").read_bytes() == b"x = 1\n"
            assert dirs.work.stat().st_uid == identity.uid and stat.S_IMODE(dirs.work.stat().st_mode) == 0o700
            assert (dirs.submission / "cs336_systems" / "__init__.py").stat().st_uid == identity.uid
            for path in (dirs.root, dirs.kit, dirs.views, dirs.kit / "leaderboard" / "worker.py"):
                assert path.stat().st_uid == 0
            writable = writable_paths([dirs.root], identity, limit=100)
            assert writable and all(Path(p).is_relative_to(dirs.work) for p in writable)
        finally:
            remove_sandbox(dirs)
    assert not dirs.root.exists()


def test_the_worker_environment_is_built_from_scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("LEADERBOARD_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    dirs = make_sandbox({"adapters.py": b""}, Identity(None, None))
    try:
        env = worker_env("cpu", dirs)
        assert "hunter2" not in env.values() and "PYTHONPATH" not in env
        assert env["HOME"].startswith(str(dirs.work)) and env["TRITON_CACHE_DIR"].startswith(str(dirs.work))
        assert env["TRITON_INTERPRET"] == "1" and "TORCHINDUCTOR_COMPILE_THREADS" in worker_env("quick", dirs)
    finally:
        remove_sandbox(dirs)


def test_writable_paths_finds_what_others_could_change(tmp_path):
    (tmp_path / "kit").mkdir()
    ok = tmp_path / "kit" / "ok.py"
    ok.write_text("")
    bad = tmp_path / "kit" / "bad.py"
    bad.write_text("")
    os.chmod(bad, 0o666)
    sticky = tmp_path / "kit" / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    os.chmod(tmp_path, 0o755)
    assert writable_paths([tmp_path / "kit"], NOBODY) == [str(bad)]


def test_directories_the_uid_cannot_traverse_are_found(tmp_path):
    locked = tmp_path / "home"
    (locked / "python" / "lib").mkdir(parents=True)
    (locked / "secret").write_text("")
    os.chmod(tmp_path, 0o755)
    os.chmod(locked, 0o700)
    target = str(locked / "python" / "lib")
    blocked = blocked_directories([target], NOBODY.uid, NOBODY.gid)
    assert blocked[str(locked)] == {"python"}  # "secret" stays covered
    assert all(Path(d) in tmp_path.parents for d in set(blocked) - {str(locked)})  # pytest's own 0700 base
    assert unreadable([target], NOBODY.uid, NOBODY.gid) == []
    os.chmod(locked / "python" / "lib", 0o700)
    assert unreadable([target], NOBODY.uid, NOBODY.gid)[0].startswith(target)
