"""Grade one submission: take it in, run the visible and hidden suites, write results.json.

Read by staff who run or change the grader; ``python -m autograder grade --help`` is the
front door. The steps:

1. copy the submission's ``adapters.py`` and ``cs336_systems/**/*.py`` into a fresh folder
   (autograder/intake.py), leaving everything else out;
2. refuse to go on unless the submission can be isolated: as root, the hidden tests and the
   reference become readable by root only, and each test process (the harness) runs the
   submission in an executor under its own leased user id (confine/uid_pool.py,
   tests/executor/); not as root, only with ``--same-user``;
3. run each suite in its own pytest processes under a watchdog (autograder/runner.py), several
   chains of processes at a time, with test files packed into chains by their expected
   durations (autograder/schedule.py);
4. share each problem's points among its tests (autograder/scoring.py), write
   ``results.json`` whatever happened, and print a per-problem table.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confine import uid_pool
from autograder.cpus import usable_cpus
from autograder.manifest import Manifest, load_manifest
from autograder.python_mirror import interpreter_paths, library_path, mirrored_python
from autograder.redaction import hidden_text, shown_nodeid
from autograder.results import results_json, slowest_line, write_results
from autograder.runner import KIT, SuiteRun, SuiteSpec, Verdict, base_env, run_suite
from autograder.intake import IntakeReport, SubmissionRejected, copy_submission
from autograder.schedule import DurationsError, load_durations, plan_chains
from autograder.score_table import format_table
from autograder.scoring import collect_tests, rejected_tests
from autograder.zygote import Zygote
from tests import gpus
from tests.submission import SubmissionNotFound, kit_link_roots

SUITE_DIRS = {"visible": Path("tests"), "hidden": Path("autograder") / "hidden_tests"}
STAFF_ONLY = (Path("autograder") / "hidden_tests", Path("fixtures"), Path("reference"))
# Per executor (the process that runs the submission), set so that the reference passes with room
# to spare: measured peaks are in autograder/README.md. The address-space limit applies only where
# CUDA is absent (CUDA reserves far more address space than it uses).
EXECUTOR_LIMITS = {"as_bytes": 8 << 30, "cpu_s": 3600, "fsize_bytes": 2 << 30, "nproc": 1024}


@dataclass
class GradeOptions:
    """Everything ``grade`` needs; the CLI (autograder/__main__.py) fills it from flags."""

    submission: Path
    out: Path | None = None
    problems: list[str] | None = None
    keyword: str | None = None
    tests: list[str] | None = None
    suites: tuple[str, ...] = ("visible", "hidden")
    test_timeout_s: float | None = None
    total_timeout_s: float | None = None
    require_gpu: bool = False
    same_user: bool = False
    jobs: int | None = None
    leaderboard: list | None = None
    verbose: bool = False
    quiet: bool = False
    kit: Path = KIT
    manifest: Manifest | None = None
    zygote: bool = True


@dataclass
class GradeReport:
    """What ``grade`` returns: the results dict (also written to disk) and how the run went."""

    results: dict
    table: str
    tests: list = field(default_factory=list)
    runs: list[SuiteRun] = field(default_factory=list)
    intake: IntakeReport | None = None
    seconds: float = 0.0
    results_path: Path | None = None
    exit_code: int = 0
    executor_user: str | None = None


class _Printer:
    """Progress lines, one per finished test file, and at once for crashes and restarts."""

    def __init__(self, verbose: bool, quiet: bool):
        self.verbose, self.quiet = verbose, quiet
        self.lock = threading.Lock()
        self.files: dict[tuple[str, str], list[str]] = {}
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if self.quiet:
            return
        with self.lock:
            print(text, flush=True)

    def result(self, suite: str, outcome: Verdict) -> None:
        file = outcome.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        mark = {"passed": ".", "failed": "F", "not_graded": "g"}[outcome.status]
        with self.lock:
            for (other_suite, other_file) in [key for key in self.files if key[0] == suite and key[1] != file]:
                self._flush(other_suite, other_file)
            self.files.setdefault((suite, file), []).append(mark)
            if self.verbose and not self.quiet:
                shown = shown_nodeid(outcome.nodeid, suite, hidden_text())
                print(f"  [{suite.split('#')[0]}] {outcome.status:<10} {shown} ({outcome.duration:.1f} s)", flush=True)

    def _flush(self, suite: str, file: str) -> None:
        marks = self.files.pop((suite, file))
        if self.quiet:
            return
        counts = f"{marks.count('.')}/{len(marks)} passed" + (f", {marks.count('g')} need a GPU" if "g" in marks else "")
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {suite.split('#')[0]:<7} {file:<44} {''.join(marks)[:40]:<40} {counts}", flush=True)

    def flush_all(self) -> None:
        with self.lock:
            for key in list(self.files):
                self._flush(*key)


def _readable_as(uid: int, gid: int, paths: list[Path]) -> list[bool]:
    """Whether the user ``uid`` can read each of ``paths`` (checked in a forked child that drops to it)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only os calls, then _exit
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            answer = "".join("1" if os.access(path, os.R_OK) else "0" for path in paths)
            os.write(write_end, answer.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 4096).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    return [flag == "1" for flag in answer.ljust(len(paths), "0")]


def _executor_python(uid: int, gid: int, kit: Path) -> tuple[str | None, dict[str, str], str | None]:
    """The python the harness and its executors run, extra environment for it, and why if none can.

    None means an executor's user cannot read the installed packages, so the submission cannot
    run isolated; the grade then stops (it never runs student code with the grader's rights).
    """
    site = Path(importlib.util.find_spec("torch").origin).resolve().parent.parent
    site_ok, *python_ok = _readable_as(uid, gid, [site, *interpreter_paths()])
    if not site_ok:
        return None, {}, (f"an unprivileged user cannot read the kit's packages ({site}), so the submission cannot "
                          f"run isolated; make that folder world-readable (chmod -R o+rX {site})")
    if all(python_ok):
        return sys.executable, {}, None
    python = mirrored_python(site)
    return str(python), {"LD_LIBRARY_PATH": library_path(python)}, None


def _protect_staff_files(kit: Path) -> None:
    """Make the hidden tests, the fixtures and the reference unreadable by anyone but root.

    The hidden tests' folders stay traversable (0711), so that pytest, having imported them as
    root, can still ``stat`` them after dropping privileges; their files are 0600.
    """
    for relative in STAFF_ONLY:
        path = kit / relative
        if not path.exists():
            continue
        if relative == STAFF_ONLY[0]:
            for sub in [path, *path.rglob("*")]:
                sub.chmod(0o711 if sub.is_dir() else 0o600)
        else:
            path.chmod(0o700)


def _executor_limits() -> dict[str, int | None]:
    """EXECUTOR_LIMITS for this machine: no address-space limit where CUDA runs, no process limit unless root."""
    limits = dict(EXECUTOR_LIMITS)
    if gpus.driver_present():
        limits["as_bytes"] = None
    if os.geteuid() != 0:
        limits["nproc"] = None  # it would count every process of this user, not only the executor's
    return limits


def _test_files(kit: Path, manifest: Manifest, suites, problems) -> tuple[dict[str, list[Path]], list[str]]:
    wanted = {problem.name for problem in problems}
    files: dict[str, list[Path]] = {}
    unmapped = []
    for suite in suites:
        folder = kit / SUITE_DIRS[suite]
        chosen = []
        for path in sorted(folder.glob("test_*.py")):
            problem = manifest.problem_of_file(path.name)
            if path.name in manifest.settings.ungraded:
                continue
            if problem is None:
                unmapped.append(str(path.relative_to(kit)))
            elif problem.name in wanted:
                chosen.append(path)
        files[suite] = chosen
    return files, unmapped


GPU_JOBS_MAX = 8  # process chains at a time on a GPU runner, at most
GPU_GIB_PER_JOB = 16  # GPU memory set aside per chain (see _default_jobs)


def _gpu_memory_gib() -> float | None:
    """The smallest GPU's memory in GiB according to nvidia-smi, or None if it cannot say."""
    sizes = [gpu.memory_mib for gpu in gpus.listed()]
    return min(sizes) / 1024 if sizes and None not in sizes else None


def _default_jobs() -> int:
    """Test process chains at a time when --jobs is not given.

    CPU runner: up to 4, at most the CPUs it may use (``usable_cpus``: affinity and cgroup quota).

    GPU runner: up to 8, at most half the CPU count (Triton and inductor compile on the CPU,
    each test process its own kernels) and at most one per 16 GiB of GPU memory, but never
    fewer than 2 (2 if nvidia-smi cannot say). 16 GiB per chain: the largest test process (the
    hidden out-of-memory CLI test) holds about 30 GB for a moment, every other one a few GB.

    Sharing one GPU among chains leaves the verdicts alone: the GPU memory checks read the test
    process's own counters (torch.cuda.memory_allocated, its own memory snapshot), which other
    processes do not move; the out-of-memory checks ask for far more than the GPU holds; the
    other GPU checks compare values, not times. The only verdicts that compare or bound GPU
    timings (§2.1's sweep: the forward at 4096 tokens slower than at 1024, forward and backward
    under 100 ms) are in files marked ``alone_on_gpu`` in autograder/test_durations.toml, which
    run after every other chain has finished (autograder/schedule.py).
    """
    cpus = usable_cpus()
    if not gpus.driver_present():
        return min(4, cpus)
    memory = _gpu_memory_gib()
    by_memory = 2 if memory is None else max(2, int(memory // GPU_GIB_PER_JOB))
    return max(1, min(GPU_JOBS_MAX, max(2, cpus // 2), by_memory, cpus))


def grade(options: GradeOptions) -> GradeReport:
    """Grade ``options.submission``; always returns (and writes, with ``out``) a complete results dict."""
    started = time.monotonic()
    kit = options.kit.resolve()
    manifest = options.manifest or load_manifest()
    printer = _Printer(options.verbose, options.quiet)
    settings = manifest.settings
    if options.problems:
        unknown = sorted(set(options.problems) - set(manifest.by_name))
        if unknown:
            raise SystemExit(f"grade: unknown problem(s) {unknown}; known: {[p.name for p in manifest.problems]}")
        problems = [p for p in manifest.problems if p.name in options.problems]
    else:
        problems = list(manifest.problems)
    if options.tests:
        chosen = {manifest.problem_of_file(nodeid.split("::", 1)[0].rsplit("/", 1)[-1]) for nodeid in options.tests}
        if None in chosen:
            raise SystemExit("grade: --tests: every node id must be in a test_<problem>*.py file of the manifest")
        problems = [p for p in problems if p in chosen]
    complete = (not options.problems and not options.keyword and not options.tests
                and set(options.suites) == set(SUITE_DIRS))
    notes: list[str] = []

    # Asked of a fresh interpreter: the grader itself never imports torch or initialises CUDA (tests/gpus.py).
    if options.require_gpu and not gpus.probe_count():
        message = ("--require-gpu was given but this runner has no CUDA GPU (torch.cuda.is_available() is False); "
                   "no test was run. Grade on a GPU runner, or drop --require-gpu to grade on CPU.")
        print(f"grade: ERROR: {message}", file=sys.stderr, flush=True)
        results = results_json([], manifest, execution_time=time.monotonic() - started, output=message)
        path = options.out / "results.json" if options.out else None
        if path:
            write_results(path, results)
        return GradeReport(results, message, seconds=time.monotonic() - started, results_path=path, exit_code=2)

    private = Path(tempfile.mkdtemp(prefix="cs336-grade-"))
    shared = Path(tempfile.mkdtemp(prefix="cs336-grade-shared-"))
    try:
        shared.chmod(0o711)  # traversable by the executors, listable and readable by no one else
        submission_dir = shared / "submission"
        try:
            intake = copy_submission(options.submission, submission_dir, link_roots=kit_link_roots(kit))
        except SubmissionRejected as error:  # a corrupt zip, or one over the limits: no test runs
            return _rejected(options, manifest, problems, error, started)
        except SubmissionNotFound as error:
            notes.append(f"no submission found: {error}")
            shutil.rmtree(submission_dir, ignore_errors=True)
            intake = copy_submission(private / "empty-upload", submission_dir)
        submission_dir.chmod(0o700)  # only the harness (root) reads it; each executor gets a copy of its own
        isolated = os.geteuid() == 0
        user = "its own unprivileged user id (one per test process)" if isolated else None
        python, python_env = sys.executable, {}
        refusal = None
        if not isolated and not options.same_user:
            refusal = ("the grader is not running as root, so it cannot run the submission as an unprivileged user "
                       "apart from the tests; run it as root (sudo), or pass --same-user to grade code you trust "
                       "(such as the reference) as yourself")
        elif isolated:
            with uid_pool.leased() as probe:
                found, python_env, why = _executor_python(probe.uid, probe.gid, kit)
            refusal = None if found else f"the submission cannot be isolated: {why}"
            python = found or python
            _protect_staff_files(kit)
        if refusal is not None:
            print(f"grade: ERROR: {refusal}", file=sys.stderr, flush=True)
            results = results_json([], manifest, execution_time=time.monotonic() - started,
                                   output=f"The grader could not run: {refusal}.")
            path = options.out / "results.json" if options.out else None
            if path:
                write_results(path, results)
            return GradeReport(results, refusal, seconds=time.monotonic() - started, results_path=path, exit_code=2)
        workdir = shared / "work"
        for sub in ("", "home", "tmp", "cache"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
            (workdir / sub).chmod(0o711 if sub == "" else 0o700)
        files, unmapped = _test_files(kit, manifest, options.suites, problems)
        if options.tests:
            wanted_files = {nodeid.split("::", 1)[0] for nodeid in options.tests}
            files = {suite: [p for p in paths if p.relative_to(kit).as_posix() in wanted_files]
                     for suite, paths in files.items()}
        if unmapped:
            notes.append("test files that match no problem of the manifest (not graded): " + ", ".join(unmapped))
        cpus = usable_cpus()
        jobs = options.jobs or _default_jobs()
        if jobs > cpus:  # more chains than CPUs: each test's time would depend on how many others run
            notes.append(f"--jobs {jobs} was lowered to {cpus}, the CPUs this grade may use")
            printer.say(f"grade: --jobs {jobs} is more than the {cpus} CPU(s) this grade may use; running {cpus} at a time")
            jobs = cpus
        try:
            durations = load_durations()
        except DurationsError as error:  # a broken timing table must not stop a grade
            printer.say(f"grade: packing test files by size: {error}")
            durations = {}
        chains = plan_chains(files, jobs, kit, gpu=gpus.driver_present(), durations=durations)
        together = [chain for chain in chains if not chain.alone]
        at_once = min(jobs, max(1, len(together)))
        test_timeout = options.test_timeout_s or settings.test_timeout_s
        deadline = started + (options.total_timeout_s or settings.total_timeout_s)
        printer.say(f"grade: {options.submission} ({intake.summary().splitlines()[0]})")
        alone_note = (f", then {len(chains) - len(together)} alone (they compare GPU timings)"
                      if len(together) < len(chains) else "")
        printer.say(f"grade: {len(chains)} test process chain(s), {at_once} at a time{alone_note}; "
                    f"per-test limit {test_timeout:.0f} s; "
                    + (f"the submission runs as {user}" if user else "the submission runs as this user (--same-user)"))

        def problem_of(nodeid: str) -> str:
            problem = manifest.problem_of_file(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
            return problem.name if problem else "?"

        runs: list[SuiteRun] = []
        threads_each = max(1, cpus // at_once)
        specs = [
            SuiteSpec(
                name=chain.suite, files=chain.files, submission=submission_dir, workdir=workdir,
                private_dir=private, problem_of=problem_of, test_timeout_s=test_timeout, deadline=deadline,
                crash_streak_limit=settings.crash_streak_limit, restart_limit=settings.restart_limit,
                keyword=options.keyword, select=options.tests, executor_uids=isolated,
                executor_limits=_executor_limits(),
                threads=threads_each, on_result=printer.result, python=python, extra_env=python_env,
                on_note=lambda suite, note: printer.say(f"          {suite.split('#')[0]:<7} {note}"), kit=kit,
                shard=chain.index, shards=chain.shards,
            )
            for chain in chains
        ]
        zygote = _zygote_for(python, kit, threads_each, python_env) if options.zygote and specs else None
        for spec in specs:
            spec.zygote = zygote
        runs = _run_chains(specs, [chain.alone for chain in chains], jobs)
        printer.flush_all()
        printer.say(_chain_times(chains, specs, runs))
        printer.say(_file_test_times(runs))
    finally:
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)

    merged = _merge(runs)
    tests = collect_tests(manifest, merged, problems, complete)
    table = format_table(tests, problems)
    seconds = time.monotonic() - started
    present = next((run.gpus for run in merged if run.gpus is not None), None)
    runner = (f"GPU runner (CUDA available, {present} GPU{'s' * (present != 1)})" if present
              else "CPU runner (no CUDA: Triton runs in its interpreter)")
    restarts = sum(run.restarts for run in merged)
    lines = [f"Graded on a {runner} in {seconds:.1f} s.", "", table, "", "Submission: " + intake.summary()]
    if restarts:
        lines.append(f"The test process was restarted {restarts} time(s) after a crash, hang or tampering; "
                     "see the failed tests' messages.")
    lines += notes
    slowest = slowest_line(merged, manifest)  # no hidden test named: students see it before publication
    if slowest:
        lines.append(slowest)
    output = "\n".join(lines)
    results = results_json(tests, manifest, execution_time=seconds, output=output, leaderboard=options.leaderboard,
                           gpus_present=present, no_test_ran=_no_test_ran(intake, notes))
    path = None
    if options.out is not None:
        path = options.out / "results.json"
        write_results(path, results)
    if not options.quiet:
        print()
        print(table)
        for line in lines[4:]:
            print(line)
        if path:
            print(f"results: {path}")
        print(f"grade: finished in {seconds:.1f} s", flush=True)
    return GradeReport(results, table, tests, merged, intake, seconds, path, 0, user)


def _rejected(options: GradeOptions, manifest: Manifest, problems, error: SubmissionRejected,
              started: float) -> GradeReport:
    """The grade of a submission the intake refused: every selected problem scores 0 with the reason."""
    message = str(error)
    tests = rejected_tests(problems, message)
    table = format_table(tests, problems)
    seconds = time.monotonic() - started
    results = results_json(tests, manifest, execution_time=seconds,
                           output=f"No test was run: {message}\n\n{table}", leaderboard=options.leaderboard,
                           no_test_ran=message)
    path = None
    if options.out is not None:
        path = options.out / "results.json"
        write_results(path, results)
    if not options.quiet:
        print(f"grade: {options.submission}: no test was run: {message}", flush=True)
        print(table)
        if path:
            print(f"results: {path}")
    return GradeReport(results, table, tests, [], error.report, seconds, path, 0, None)


def _no_test_ran(intake, notes: list[str]) -> str | None:
    """Why no test could grade this submission (its tests all ran, and all failed for it), or None."""
    missing = [note for note in notes if note.startswith("no submission found")]
    if missing:
        return missing[0]
    if intake is not None and intake.no_adapters:
        return "the submission has no adapters.py at its top level: every test failed importing it"
    return None


_ZYGOTES: dict[tuple, Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()  # grades run side by side in threads (the selftests) share one zygote


def _zygote_for(python: str, kit: Path, threads: int, extra_env: dict[str, str]) -> Zygote | None:
    """A live zygote for these settings (started once per grader process), or None if it cannot start."""
    if os.environ.get("CS336_GRADER_ZYGOTE", "1") == "0":
        return None
    with _ZYGOTES_LOCK:
        return _start_zygote(python, kit, threads, extra_env)


def _start_zygote(python: str, kit: Path, threads: int, extra_env: dict[str, str]) -> Zygote | None:
    key = (python, str(kit), tuple(sorted(extra_env.items())))  # children set their own thread count
    zygote = _ZYGOTES.get(key)
    if zygote is not None and zygote.alive:
        return zygote
    home = Path(tempfile.mkdtemp(prefix="cs336-zygote-"))
    env = {**base_env(python, threads, extra_env), "HOME": str(home), "TMPDIR": str(home)}
    try:
        zygote = Zygote(python, kit, env, home)
    except (OSError, RuntimeError):
        return None
    _ZYGOTES[key] = zygote
    atexit.register(zygote.close)
    return zygote


def _chain_times(chains, specs: list[SuiteSpec], runs: list[SuiteRun]) -> str:
    """One console line: each chain's wall seconds against its expected seconds (to refresh
    autograder/test_durations.toml), longest first."""
    wall = {(run.name, run.shard): run.wall_s for run in runs}
    parts = []
    for chain, spec in sorted(zip(chains, specs), key=lambda pair: -pair[0].expected_s):
        seconds = wall.get((spec.name, spec.shard), 0.0)
        names = ", ".join(path.name + (f" (part {'+'.join(str(k + 1) for k in chain.shards[path][0])} of "
                                       f"{chain.shards[path][1]})" if path in chain.shards else "")
                          for path in chain.files)
        parts.append(f"{chain.suite}#{chain.index}{' (alone)' if chain.alone else ''} {seconds:.0f} s "
                     f"(expected {chain.expected_s:.0f}): {names}")
    return "grade: chain times: " + "; ".join(parts)


def _file_test_times(runs: list[SuiteRun]) -> str:
    """One console line: the summed test durations of each test file, longest first (the part of
    a file's time in autograder/test_durations.toml that excludes its process start)."""
    seconds: dict[str, float] = {}
    for run in runs:
        for nodeid, verdict in run.outcomes.items():
            file = nodeid.split("::", 1)[0]
            seconds[file] = seconds.get(file, 0.0) + verdict.duration
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    return "grade: test time per file: " + "; ".join(f"{file} {total:.1f} s" for file, total in ranked)


def _run_chains(specs: list[SuiteSpec], alone: list[bool], jobs: int) -> list[SuiteRun]:
    """Run the chains not marked ``alone``, ``jobs`` at a time; then the others, one at a time."""
    together = [spec for spec, flag in zip(specs, alone) if not flag]
    return _run_all(together, jobs) + _run_all([spec for spec, flag in zip(specs, alone) if flag], 1)


def _run_all(specs: list[SuiteSpec], jobs: int) -> list[SuiteRun]:
    """Run the chains, ``jobs`` at a time in the given order, each in its own watchdog thread."""
    results: list[SuiteRun | None] = [None] * len(specs)
    queue = list(enumerate(specs))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, spec = queue.pop(0)
            try:
                results[index] = run_suite(spec)
            except Exception as error:  # noqa: BLE001 - a grader bug must cost this shard, not the grade
                failed = SuiteRun(spec.name, files=[p.relative_to(spec.kit).as_posix() for p in spec.files],
                                  shard=spec.shard)
                failed.startup_failure = f"the grader failed while running these tests: {type(error).__name__}: {error}"
                results[index] = failed

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(jobs, len(specs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [run for run in results if run is not None]


def _merge(runs: list[SuiteRun]) -> list[SuiteRun]:
    """One SuiteRun per suite (shards of a suite merged, in file order)."""
    merged: dict[str, SuiteRun] = {}
    for run in runs:
        target = merged.setdefault(run.name, SuiteRun(run.name))
        target.outcomes.update(run.outcomes)
        target.collect_errors += [error for error in run.collect_errors if error not in target.collect_errors]
        target.gpus = run.gpus if run.gpus is not None else target.gpus
        target.restarts += run.restarts
        target.wall_s = max(target.wall_s, run.wall_s)
        if run.startup_failure:
            target.files += run.files
            target.startup_failure = run.startup_failure
    for run in merged.values():
        run.outcomes = dict(sorted(run.outcomes.items(), key=lambda item: item[0].split("::", 1)[0]))
    return list(merged.values())
