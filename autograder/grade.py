"""Grade one submission: take it in, run the visible and hidden suites, write results.json.

Read by staff who run or change the grader; ``python -m autograder grade --help`` is the
front door. The steps:

1. copy the submission's ``adapters.py`` and ``cs336_systems/**/*.py`` into a fresh folder
   (autograder/intake.py), leaving everything else out;
2. refuse to go on unless the submission can be isolated: as root, the hidden tests and the
   reference become readable by root only, and each test process (the harness) runs the
   submission in an executor under its own leased user id (confine/uid_pool.py,
   autograder/executor_user.py, executor/); not as root, only with ``--same-user``;
3. run each suite in its own pytest processes under a watchdog (autograder/watchdog.py), several
   chains of processes at a time (autograder/chains.py), with test files packed into chains by
   their expected durations (autograder/schedule.py), printing progress as files finish
   (autograder/progress.py);
4. share each problem's points among its tests (autograder/scoring.py), write
   ``results.json`` whatever happened, and print a per-problem table.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from confine import uid_pool
from confine.views import why_unreadable
from autograder.chains import chain_times, default_jobs, file_test_times, merge, run_chains, zygote_for
from autograder.cpus import usable_cpus
from autograder.gpu_quiet import Opening
from autograder.executor_user import executor_limits, protect_staff_files
from autograder.manifest import Manifest, load_manifest
from autograder.progress import Progress
from autograder.results import results_json, slowest_line, write_results
from autograder.watchdog import TIME_LIMIT_RAN_OUT, SuiteRun, append_timeline
from autograder.intake import IntakeReport, SubmissionRejected, copy_submission
from autograder.schedule import DurationsError, load_durations, plan_chains
from autograder.suite_spec import KIT, POOLED, SUITE_DIRS, SuiteSpec
from autograder.test_pool import Pool
from autograder.score_table import format_table
from autograder.scoring import collect_tests, rejected_tests
from harness import gpus
from harness.submission import SubmissionNotFound, kit_link_roots



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
    timeline: Path | None = None  # a JSON-lines file of when each test waited, started and ended


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


def _test_files(kit: Path, manifest: Manifest, suites, problems) -> tuple[dict[str, list[Path]], list[str]]:
    wanted = {problem.name for problem in problems}
    files: dict[str, list[Path]] = {}
    unmapped = []
    for suite in suites:
        folder = kit / SUITE_DIRS[suite]
        chosen = []
        for path in sorted(folder.glob("test_*.py")):
            problem = manifest.problem_of_file(path.name)
            if path.name in manifest.settings.ungraded or manifest.in_other_edition(path.name):
                continue  # kit tests of provided code; tests of another edition's problems
            if problem is None:
                unmapped.append(str(path.relative_to(kit)))
            elif problem.name in wanted:
                chosen.append(path)
        files[suite] = chosen
    return files, unmapped


DIAGNOSTICS_LOG = "grade.log"  # in --out: the staff's timing lines (autograder/tools/time_test_files.py reads them)


def staff_diagnostics(options: GradeOptions, lines: list[str], printer: Progress) -> None:
    """Where the staff's timing lines go (``grade: chain times``, ``grade: test time per file``):
    appended to ``--out``/grade.log, and to the console only with ``--verbose``. A student or TA
    reading a grade's console sees its progress and table, not two lines of 2,000 characters."""
    if options.out is not None:
        Path(options.out).mkdir(parents=True, exist_ok=True)
        with open(Path(options.out) / DIAGNOSTICS_LOG, "a", encoding="utf-8") as log:
            log.write("".join(line + "\n" for line in lines))
    if options.verbose:
        for line in lines:
            printer.say(line)


def grade(options: GradeOptions) -> GradeReport:
    """Grade ``options.submission``; always returns (and writes, with ``out``) a complete results dict.

    The steps, each a function below: choose the problems, take the submission in, decide how it
    is isolated, plan the chains of test processes, build their specs, run them, and report."""
    started = time.monotonic()
    if options.timeline is not None:
        append_timeline(options.timeline, "grade")  # the chains' events follow (autograder/watchdog.py)
    kit = options.kit.resolve()
    manifest = options.manifest or load_manifest()
    printer = Progress(options.verbose, options.quiet)
    problems, complete = _chosen_problems(options, manifest)
    notes: list[str] = []
    gpu_probe = _probe_gpus(options)
    private = Path(tempfile.mkdtemp(prefix="cs336-grade-"))
    shared = Path(tempfile.mkdtemp(prefix="cs336-grade-shared-"))
    replay_lease = None
    runs: list[SuiteRun] = []
    try:
        shared.chmod(0o711)  # traversable by the executors, listable and readable by no one else
        submission_dir = shared / "submission"
        try:
            intake = _take_in(options, kit, submission_dir, private, notes)
        except SubmissionRejected as error:  # a corrupt zip, or one over the limits: no test runs
            if gpu_probe is not None and not gpu_probe.result():
                return _no_gpu(options, manifest, started)
            return _rejected(options, manifest, problems, error, started)
        isolation = _isolation(options, kit)
        if isolation.refusal is not None:
            return _refused(options, manifest, isolation.refusal, started)
        workdir = _work_folder(shared)
        # One replay user and one Triton cache for the grade's replays (harness/replay.py): a
        # kernel the replays compiled once is not compiled again by another chain's replay.
        replay_lease = uid_pool.lease(start=os.getpid() + 4096) if isolation.isolated else None
        plan = _plan(options, kit, manifest, problems, notes, printer, started)
        printer.say(f"grade: {options.submission} ({intake.summary().splitlines()[0]})")
        alone_note = ", each test marked alone_on_gpu alone on the GPU" if plan.on_gpu else ""
        printer.say(f"grade: {len(plan.chains)} test process chain(s), {plan.at_once} at a time{alone_note}; "
                    f"per-test limit {plan.test_timeout:.0f} s, {plan.time_limit:.0f} s in all; "
                    + (f"the submission runs as {isolation.user}" if isolation.user
                       else "the submission runs as this user (--same-user)"))
        specs = _suite_specs(options, kit, manifest, plan, isolation, submission_dir, workdir, private, printer,
                             replay_lease.uid if replay_lease else None)
        if gpu_probe is not None and not gpu_probe.result():
            return _no_gpu(options, manifest, started)
        runs = _run(specs, plan, private, printer)
        staff_diagnostics(options, [chain_times(plan.chains, specs, runs), file_test_times(runs)], printer)
    finally:
        if replay_lease is not None:
            replay_lease.release()  # kills every replay process and removes the user's files
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
    if options.timeline is not None:
        append_timeline(options.timeline, "graded")
    return _report(options, manifest, problems, complete, runs, intake, notes, plan, started, isolation.user)


def _chosen_problems(options: GradeOptions, manifest: Manifest) -> tuple[list, bool]:
    """The problems this grade covers (``--problems``, narrowed by ``--tests``), and whether it is
    complete (every problem, both suites, no keyword): only a complete grade fails an unrun test."""
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
    return problems, complete


def _probe_gpus(options: GradeOptions):
    """With ``--require-gpu``, a future of the GPU count, asked of a fresh interpreter: the grader
    itself never imports torch or initialises CUDA (harness/gpus.py). It imports torch while
    the grade copies the submission and starts its zygote. None without the flag."""
    if not options.require_gpu:
        return None
    probing = ThreadPoolExecutor(1)
    gpu_probe = probing.submit(gpus.probe_count)
    probing.shutdown(wait=False)  # its thread ends with the probe
    return gpu_probe


def _take_in(options: GradeOptions, kit: Path, submission_dir: Path, private: Path, notes: list[str]) -> IntakeReport:
    """Copy the submission's files into ``submission_dir`` (only the harness reads it); a missing
    submission is graded as an empty one, with a note. Raises SubmissionRejected for a corrupt zip."""
    try:
        intake = copy_submission(options.submission, submission_dir, link_roots=kit_link_roots(kit))
    except SubmissionNotFound as error:
        notes.append(f"no submission found: {error}")
        shutil.rmtree(submission_dir, ignore_errors=True)
        empty = private / "empty-upload"
        empty.mkdir(exist_ok=True)
        intake = copy_submission(empty, submission_dir)
    submission_dir.chmod(0o700)  # only the harness (root) reads it; each executor gets a copy of its own
    return intake


@dataclass
class Isolation:
    """How the submission runs: as root, each executor under its own leased uid (``isolated``),
    which must be able to read this Python (through views where a directory on the way is
    closed: confine/views.py); else as this user, only with ``--same-user``. ``refusal`` says why
    the grade cannot run at all (None: it can)."""

    isolated: bool
    user: str | None = None
    refusal: str | None = None


def _isolation(options: GradeOptions, kit: Path) -> Isolation:
    """Decide how the submission is kept apart from the grader (GradeOptions.same_user, root)."""
    isolated = os.geteuid() == 0
    if not isolated:
        if options.same_user:
            return Isolation(False)
        return Isolation(False, refusal=(
            "the grader is not running as root, so it cannot run the submission as an unprivileged user apart from "
            "the tests; run it as root (sudo), or pass --same-user to grade code you trust (such as the reference) "
            "as yourself"))
    with uid_pool.leased() as probe:
        why = why_unreadable(probe.uid, probe.gid)
    protect_staff_files(kit)
    return Isolation(True, "its own unprivileged user id (one per test process)",
                     f"the submission cannot be isolated: {why}" if why else None)


def _refused(options: GradeOptions, manifest: Manifest, refusal: str, started: float) -> GradeReport:
    """The grade that could not run (exit status 2): results.json says why."""
    print(f"grade: ERROR: {refusal}", file=sys.stderr, flush=True)
    results = results_json([], manifest, execution_time=time.monotonic() - started,
                           output=f"The grader could not run: {refusal}.")
    path = options.out / "results.json" if options.out else None
    if path:
        write_results(path, results)
    return GradeReport(results, refusal, seconds=time.monotonic() - started, results_path=path, exit_code=2)


def _work_folder(shared: Path) -> Path:
    """The executors' shared work folder: traversable by them, its home, tmp and cache private."""
    workdir = shared / "work"
    for sub in ("", "home", "tmp", "cache"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
        (workdir / sub).chmod(0o711 if sub == "" else 0o700)
    return workdir


@dataclass
class Plan:
    """The grade's chains of test processes and its limits (``_plan``)."""

    chains: list
    jobs: int
    at_once: int
    threads_each: int
    test_timeout: float
    time_limit: float
    deadline: float
    on_gpu: bool


def _plan(options: GradeOptions, kit: Path, manifest: Manifest, problems, notes: list[str], printer: Progress,
          started: float) -> Plan:
    """Pack the chosen test files into chains (autograder/schedule.py), no more at once than the
    grade's CPUs, with the per-test and total time limits."""
    files, unmapped = _test_files(kit, manifest, options.suites, problems)
    if options.tests:
        wanted_files = {nodeid.split("::", 1)[0] for nodeid in options.tests}
        files = {suite: [p for p in paths if p.relative_to(kit).as_posix() in wanted_files]
                 for suite, paths in files.items()}
    if unmapped:
        notes.append("test files that match no problem of the manifest (not graded): " + ", ".join(unmapped))
    cpus = usable_cpus()
    jobs = options.jobs or default_jobs()
    if jobs > cpus:  # more chains than CPUs: each test's time would depend on how many others run
        notes.append(f"--jobs {jobs} was lowered to {cpus}, the CPUs this grade may use")
        printer.say(f"grade: --jobs {jobs} is more than the {cpus} CPU(s) this grade may use; running {cpus} at a time")
        jobs = cpus
    try:
        durations = load_durations()
    except DurationsError as error:  # a broken timing table must not stop a grade
        printer.say(f"grade: estimating test files by size: {error}")
        durations = {}
    on_gpu = gpus.driver_present()
    # One pool of every chosen file, hidden and visible: each chain takes tests of both suites, so the
    # chains end together whichever suite is longer (the reference on a 2-core CPU: hidden 38 s of
    # chain, visible 27 s, when each suite had its own); the verdicts are split by suite again in merge.
    pooled = {POOLED: [path for suite in files for path in files[suite]]}
    chains = plan_chains(pooled, jobs, kit, gpu=on_gpu, durations=durations)
    at_once = min(jobs, max(1, len(chains)))
    time_limit = options.total_timeout_s or manifest.time_limit_s([p.name for p in problems], on_gpu)
    return Plan(chains, jobs, at_once, max(1, cpus // at_once),
                options.test_timeout_s or manifest.settings.test_timeout_s, time_limit, started + time_limit, on_gpu)


def _suite_specs(options: GradeOptions, kit: Path, manifest: Manifest, plan: Plan, isolation: Isolation,
                 submission_dir: Path, workdir: Path, private: Path, printer: Progress,
                 replay_uid: int | None) -> list[SuiteSpec]:
    """One SuiteSpec per chain, with its share of its suite's tests (autograder/test_pool.py) and
    the grade's zygote to fork its test processes from."""
    settings = manifest.settings

    def problem_of(nodeid: str) -> str:
        problem = manifest.problem_of_file(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
        return problem.name if problem else "?"

    specs = [
        SuiteSpec(
            name=chain.suite, files=chain.files, submission=submission_dir, workdir=workdir,
            private_dir=private, problem_of=problem_of, test_timeout_s=plan.test_timeout, deadline=plan.deadline,
            crash_streak_limit=settings.crash_streak_limit, restart_limit=settings.restart_limit,
            keyword=options.keyword, select=options.tests, executor_uids=isolation.isolated,
            executor_limits=executor_limits(),
            threads=plan.threads_each, on_result=printer.result,
            on_note=lambda suite, note: printer.say(f"          {suite.split('#')[0]:<7} {note}"), kit=kit,
            shard=chain.index, gpu_lock=private / "gpu-quiet" if plan.on_gpu else None, timeline=options.timeline,
            pool=Pool(private / f"claims-{chain.suite}", f"{chain.suite}#{chain.index}", chain.start,
                      {path.relative_to(kit).as_posix(): seconds for path, seconds in chain.weights.items()}),
            replay_uid=replay_uid, replay_cache=workdir / "replay-cache",
        )
        for chain in plan.chains
    ]
    for suite in {chain.suite for chain in plan.chains}:
        (private / f"claims-{suite}").mkdir(mode=0o700)
    zygote = (zygote_for(kit, plan.threads_each)
              if options.zygote and specs else None)
    for spec in specs:
        spec.zygote = zygote
    return specs


def _run(specs: list[SuiteSpec], plan: Plan, private: Path, printer: Progress) -> list[SuiteRun]:
    """Run the chains, ``plan.jobs`` at a time. On a GPU, the tests marked alone_on_gpu run first,
    while every other test waits (gpu_quiet.py)."""
    opening = Opening(private / "gpu-quiet", {spec.name for spec in specs[:plan.jobs]}) if plan.on_gpu else None
    if opening is not None:
        def report(suite: str, outcome) -> None:
            printer.result(suite, outcome)
            opening.settled(outcome.nodeid)

        for spec in specs:
            spec.on_collected, spec.on_result = opening.collected, report
    try:
        runs = run_chains(specs, plan.jobs, on_chain_end=opening.chain_ended if opening else lambda suite: None)
    finally:
        if opening is not None:
            opening.release()
    printer.flush_all()
    return runs


def _report(options: GradeOptions, manifest: Manifest, problems, complete: bool, runs: list[SuiteRun],
            intake: IntakeReport, notes: list[str], plan: Plan, started: float, user: str | None) -> GradeReport:
    """Share the points (autograder/scoring.py), write results.json and print the table."""
    merged = merge(runs)
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
    cut = sum(TIME_LIMIT_RAN_OUT in verdict.message for run in merged for verdict in run.outcomes.values())
    if cut:
        lines.append(f"{cut} test(s) failed because this grade's time limit of {plan.time_limit:.0f} s ran out "
                     f"({_limit_source(options, manifest, problems, plan.on_gpu)}); the rest of the grade stands. "
                     "Staff can regrade with a longer one: python -m autograder grade --timeout SECONDS.")
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


def _no_gpu(options: GradeOptions, manifest: Manifest, started: float) -> GradeReport:
    """The grade of a runner without the GPU that --require-gpu asked for: no test ran."""
    message = ("--require-gpu was given but this runner has no CUDA GPU (torch.cuda.is_available() is False); "
               "no test was run. Grade on a GPU runner, or drop --require-gpu to grade on CPU.")
    print(f"grade: ERROR: {message}", file=sys.stderr, flush=True)
    results = results_json([], manifest, execution_time=time.monotonic() - started, output=message)
    path = options.out / "results.json" if options.out else None
    if path:
        write_results(path, results)
    return GradeReport(results, message, seconds=time.monotonic() - started, results_path=path, exit_code=2)


def _limit_source(options: GradeOptions, manifest: Manifest, problems, on_gpu: bool) -> str:
    """Where a grade's total time limit came from, for the line that says tests ran out of it."""
    if options.total_timeout_s:
        return "--timeout"
    if manifest.time_limit_s([p.name for p in problems], on_gpu) < manifest.settings.total_timeout_s:
        return "the sum of these problems' gpu_time_s in autograder/manifest.toml"
    return "total_timeout_s in autograder/manifest.toml"


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
