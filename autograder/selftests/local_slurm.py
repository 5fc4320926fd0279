"""A one-node Slurm cluster on this machine, from Debian's packages, for trying the batch's Slurm path.

Read by staff who want to see ``python -m autograder batch --cluster slurm`` work before pointing
it at their cluster, and by the selftest ``test_batch_real_slurm.py``. Nothing here is used to grade
a class on a real cluster.

It runs, as root, every daemon in the foreground of its own process with all its files (config,
state, spool, pid files, logs, the database) in one folder, and on its own free loopback ports:

- ``munged`` with a key of its own (Slurm's authentication);
- ``mariadbd`` and ``slurmdbd``: the accounting database, so that ``sacct`` (what submitit reads
  job states with) answers as it does on a real cluster;
- ``slurmctld`` and ``slurmd``: one node with this machine's CPUs and memory (``slurmd -C``) in
  one CPU partition, ``cpu``; no GPUs.

    python -m autograder.selftests.local_slurm up /tmp/slurm     # prints export SLURM_CONF=...
    python -m autograder.selftests.local_slurm down /tmp/slurm   # cancels its jobs, stops the daemons

    with LocalSlurm(folder) as cluster:                      # the same from Python
        subprocess.run(["sbatch", ...], env=cluster.env())

``setup.sh`` installs the packages (``autograder/selftests/install_slurm.sh``) where it runs as root
with apt-get; ``missing()`` says what is absent. Clients (sbatch, squeue, sacct, scancel) find this
cluster through ``SLURM_CONF``; jobs submitted as root run as root, as a grade needs.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.selftests.local_slurm")

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PARTITION = "cpu"
NODE = "kitnode"
CLUSTER = "kitslurm"
# (daemon, what provides it): every program the cluster needs.
PROGRAMS = (("munged", "munge"), ("slurmctld", "slurmctld"), ("slurmd", "slurmd"), ("slurmdbd", "slurmdbd"),
            ("sbatch", "slurm-client"), ("sacct", "slurm-client"), ("scontrol", "slurm-client"),
            ("mariadbd", "mariadb-server"), ("mariadb-install-db", "mariadb-server"), ("mariadb", "mariadb-client"))
INSTALL_HINT = "bash setup.sh as root installs them (autograder/selftests/install_slurm.sh: apt-get install slurm-wlm slurmdbd mariadb-server)"
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


class LocalSlurmError(RuntimeError):
    """The cluster could not start or stop; the message names the daemon and the tail of its log."""


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path=os.pathsep.join(SBIN))


def missing() -> str | None:
    """Why a local cluster cannot start here (not root, not Linux, programs absent), or None."""
    if not sys.platform.startswith("linux"):
        return f"a local Slurm needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "a local Slurm runs its daemons as root (and a grade needs root to isolate submissions); run as root"
    absent = [f"{program} ({package})" for program, package in PROGRAMS if _which(program) is None]
    if absent:
        return f"Slurm is not installed here: missing {', '.join(absent)}; {INSTALL_HINT}"
    return None


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def node_config() -> str:
    """This machine as a Slurm node line (CPUs, sockets, cores, threads, memory), from ``slurmd -C``."""
    answer = subprocess.run([_which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=60)
    first = answer.stdout.splitlines()[0] if answer.returncode == 0 and answer.stdout else ""
    fields = dict(re.findall(r"(\w+)=(\S+)", first))
    wanted = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    if not all(name in fields for name in wanted):
        raise LocalSlurmError(f"slurmd -C did not describe this machine: {answer.stdout!r} {answer.stderr!r}")
    return " ".join(f"{name}={fields[name]}" for name in wanted)


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a live ``pid`` (to tell it from a later process that reuses the id);
    None once it has exited (a zombie counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


class LocalSlurm:
    """A one-node cluster whose every file lives under ``root``. ``start()`` returns when the node
    takes jobs; ``stop()`` cancels what is left and stops every daemon it started."""

    def __init__(self, root: Path, wait_s: float = 60.0):
        self.root = Path(root).resolve()
        self.wait_s = wait_s
        self.conf = self.root / "slurm.conf"
        self.log = self.root / "log"
        self.daemons: list[tuple[str, int, str | None]] = []  # (name, pid, start time)
        self.node = ""

    # -- what clients need --
    def env(self, base: dict | None = None) -> dict:
        """``base`` (default: this process's environment) without other clusters' SLURM_* variables,
        with SLURM_CONF naming this cluster and Slurm's programs on PATH."""
        env = {key: value for key, value in (base if base is not None else os.environ).items()
               if not key.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        path = env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        env["PATH"] = os.pathsep.join(path + [part for part in SBIN if part not in path])
        return env

    def run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=timeout)

    # -- starting --
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.log / f"{name}.out", "ab")
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=self.env(), cwd=self.root, start_new_session=True)
        log.close()
        self.daemons.append((name, process.pid, _start_time(process.pid)))
        self._save()
        return process

    def _save(self) -> None:
        state = {"daemons": self.daemons, "node": self.node, "conf": str(self.conf)}
        (self.root / "daemons.json").write_text(json.dumps(state, indent=1))

    def _tail(self, name: str, lines: int = 15) -> str:
        texts = []
        for path in sorted(self.log.glob(f"{name}*")):
            texts += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(texts[-lines:]) or "(no log)"

    def _wait(self, name: str, process: subprocess.Popen, ready, what: str) -> None:
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            if ready():
                return
            if process.poll() is not None:
                raise LocalSlurmError(f"{name} exited with status {process.returncode} before {what}; "
                                      f"its log ({self.log}):\n{self._tail(name)}")
            time.sleep(0.2)
        raise LocalSlurmError(f"{name} did not get to {what} within {self.wait_s:.0f} s; its log:\n{self._tail(name)}")

    def _port_open(self, port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    def start(self) -> LocalSlurm:
        why = missing()
        if why:
            raise LocalSlurmError(why)
        if (self.root / "daemons.json").exists():
            raise LocalSlurmError(f"{self.root} already holds a cluster: stop it first "
                                  f"(python -m autograder.selftests.local_slurm down {self.root})")
        for sub in ("munge", "db", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # munged wants its socket's folders searchable by everyone
        (self.root / "munge").chmod(0o711)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        ctld_port, slurmd_port, dbd_port, db_port = _free_ports(4)
        sock = self._start_munged()
        password = self._start_mariadb(db_port)
        self.node = node_config()
        self._write_configs(sock, ctld_port, slurmd_port, dbd_port, db_port, password)
        self._start_slurm(dbd_port)

    def _start_munged(self) -> Path:
        """munged with a key of its own; returns its socket, here."""
        munge_dir = self.root / "munge"
        sock, key = munge_dir / "munge.sock", munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munged = self._spawn("munged", [_which("munged"), "--foreground", "--force", f"--socket={sock}",
                                        f"--key-file={key}", f"--pid-file={munge_dir / 'munged.pid'}",
                                        f"--seed-file={munge_dir / 'munged.seed'}", f"--log-file={self.log / 'munged.log'}"])
        self._wait("munged", munged, sock.exists, "creating its socket")
        return sock

    def _start_mariadb(self, db_port: int) -> str:
        """MariaDB for slurmdbd (a fresh data folder, loopback TCP only); returns user slurm's password."""
        db_dir = self.root / "db"
        data, db_sock = db_dir / "data", db_dir / "mariadb.sock"
        init = subprocess.run([_which("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise LocalSlurmError(f"mariadb-install-db failed ({init.returncode}):\n{(init.stdout + init.stderr)[-2000:]}")
        mariadbd = self._spawn("mariadbd", [_which("mariadbd"), "--no-defaults", f"--datadir={data}",
                                            f"--socket={db_sock}", f"--port={db_port}", "--bind-address=127.0.0.1",
                                            "--user=root", f"--pid-file={db_dir / 'mariadbd.pid'}",
                                            f"--log-error={self.log / 'mariadbd.log'}", "--skip-name-resolve"])
        password = os.urandom(12).hex()
        grant = (f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                 "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")

        def grant_slurm() -> bool:
            answer = subprocess.run([_which("mariadb"), "--no-defaults", f"--socket={db_sock}", "-uroot", "-e", grant],
                                    capture_output=True, text=True, timeout=30)
            return answer.returncode == 0

        self._wait("mariadbd", mariadbd, grant_slurm, "taking connections")
        return password

    def _write_configs(self, sock: Path, ctld_port: int, slurmd_port: int, dbd_port: int, db_port: int,
                       password: str) -> None:
        """slurm.conf, and slurmdbd.conf beside it (slurmdbd finds it there)."""
        host = socket.gethostname().split(".")[0]
        (self.root / "plugstack.conf").write_text("")
        self.conf.write_text(f"""# A one-node cluster made by autograder/selftests/local_slurm.py; every file under {self.root}
ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool'}
SlurmctldPidFile={self.root / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'slurmd.pid'}
SlurmctldLogFile={self.log / 'slurmctld.log'}
SlurmdLogFile={self.log / 'slurmd.log'}
PlugStackConfig={self.root / 'plugstack.conf'}
MailProg=/bin/true
# No cgroups: processes are tracked through /proc (a grade's isolated executors start sessions of their own)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# sacct reads job states from slurmdbd, as on a real cluster
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={sock}
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# scancel kills a job 5 s after its SIGTERM (submitit's jobs ignore SIGTERM, waiting for a requeue)
KillWait=5
MinJobAge=300
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 {self.node} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
        dbd_conf = self.root / "slurmdbd.conf"
        dbd_conf.write_text(f"""AuthType=auth/munge
AuthInfo=socket={sock}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={self.root / 'slurmdbd.pid'}
LogFile={self.log / 'slurmdbd.log'}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=slurm
StoragePass={password}
StorageLoc=slurm_acct_db
""")
        dbd_conf.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the password)

    def _start_slurm(self, dbd_port: int) -> None:
        """slurmdbd, then the controller, then the node; returns when the node is idle."""
        slurmdbd = self._spawn("slurmdbd", [_which("slurmdbd"), "-D"])
        self._wait("slurmdbd", slurmdbd, lambda: self._port_open(dbd_port), f"listening on port {dbd_port}")
        slurmctld = self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait("slurmctld", slurmctld, lambda: self.run("scontrol", "ping", timeout=20).returncode == 0,
                   "answering scontrol ping")
        slurmd = self._spawn("slurmd", [_which("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])

        def node_idle() -> bool:
            answer = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=20)
            return answer.returncode == 0 and answer.stdout.strip().rstrip("*") == "idle"

        self._wait("slurmd", slurmd, node_idle, f"an idle node in partition {PARTITION}")

    # -- stopping --
    def stop(self, wait_s: float = 30.0) -> None:
        """Cancel every job, shut Slurm down, stop each daemon this cluster started (by the process
        id and start time it recorded). Safe to call twice, and from another process (``down``)."""
        state = self.root / "daemons.json"
        if not state.exists():
            return
        daemons = [tuple(entry) for entry in json.loads(state.read_text())["daemons"]]
        names = {name for name, *_ in daemons}
        if "slurmctld" in names:
            try:
                self.run("scancel", "--full", "--user=root", timeout=20)
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline:
                    queue = self.run("squeue", "-h", "-o", "%i", timeout=20)
                    if queue.returncode != 0 or not queue.stdout.strip():
                        break
                    time.sleep(0.5)
                self.run("scontrol", "shutdown", timeout=20)
            except (OSError, subprocess.SubprocessError):
                pass
        for name, pid, started in reversed(daemons):
            self._end(pid, started, wait_s)
        state.unlink()

    def _end(self, pid: int, started: str | None, wait_s: float) -> None:
        """SIGTERM the daemon ``pid`` if it is still the process started then, SIGKILL it after
        ``wait_s``, and reap it when it is this process's child."""
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + wait_s
            while _start_time(pid) == started and time.monotonic() < deadline:
                time.sleep(0.1)
            if _start_time(pid) == started:
                os.kill(pid, signal.SIGKILL)
        for _ in range(50):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                return  # not ours (stopped by "down" from another process): its parent reaps it
            time.sleep(0.1)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.selftests.local_slurm",
                                     description="A one-node Slurm on this machine (root; Debian's slurm-wlm).")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("folder", help="where its config, state, logs and database live (created by up)")
    args = parser.parse_args(argv)
    cluster = LocalSlurm(Path(args.folder))
    if args.action == "down":
        cluster.stop()
        print(f"local Slurm in {cluster.root}: stopped")
        return 0
    started = time.monotonic()
    try:
        cluster.start()
    except LocalSlurmError as error:
        print(f"local_slurm: {error}", file=sys.stderr)
        return 2
    print(f"local Slurm up in {time.monotonic() - started:.1f} s: partition {PARTITION}, node {NODE} "
          f"({cluster.node}); logs in {cluster.log}; stop it with: "
          f"python -m autograder.selftests.local_slurm down {cluster.root}")
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
