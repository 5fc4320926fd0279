"""Turn test verdicts into points: the Gradescope ``results.json`` and the table a TA reads.

Read by staff changing how points are shared or shown. A problem's points (from the manifest)
are shared among all its tests, visible and hidden, by weight; only a passed test earns its
share. A test that needs a GPU on a runner without one, or two GPUs on a runner with one, is
not a failure: results.json leaves it out of ``tests`` and ``score`` and says at the top of
``output`` which problems and points a grade with enough GPUs adds (the console table still
counts them, under "needs GPU").

What a student sees of a hidden test (autograder/hidden_tests/) is its name and its one
failure message, redacted (``redact_hidden``): no traceback or source text (the ``text`` field
is dropped), every ``seed=<digits>`` shown as ``seed=<hidden>``, and no secret, seed, case
label, docstring or source line of the hidden tests, as gathered from their files by
``hidden_text``. The message keeps what the assertion helpers (tests/assertions.py) say about
the error: what was compared, its shape, dtype and strides, the tolerance, the largest errors
and how many elements failed. A parametrize id is shown only when it is a plain shape/dtype
style word (``2x17x100-d32-float16-causal-sliced``, ``triton``). The secret values and the
hidden seeds are also taken out of every visible test's output and the grade's output.
Redaction is the second line of defence: hidden tests run in the harness, and the executor
that runs student code never sees their text or the secret (see autograder/README.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.manifest import Manifest, Problem
from autograder.pytest_plugin import head_and_tail
from autograder.runner import SuiteRun, Verdict

_VISIBLE_OUTPUT_CHARS = 4000
HIDDEN_TESTS = Path(__file__).resolve().parent / "hidden_tests"
SEED_ENV = "CS336_HIDDEN_SEED"  # read by autograder/hidden_tests/flash_hidden_checks.py
HIDDEN = "<hidden>"
_MIN_SECRET_CHARS = 6  # a shorter secret would be redacted out of ordinary numbers and words
_MIN_DOC_LINE_CHARS = 16  # docstring lines at least this long are never shown
_MIN_SOURCE_LINE_CHARS = 24  # nor are source lines at least this long
_SEED_VALUE = re.compile(r"(seed\W{0,3})(\d+)", re.IGNORECASE)  # seed=12, seed: 12, "seed": 12, manual_seed(12)
_TRACEBACK = re.compile(r'^\s*(File ".*", line \d+|Traceback \(most recent call last\)|\S+\.py:\d+(:|$)|>)')
# A frame in the submission's own files: kept (shortened to the path inside the submission), with
# its source line, so that a student can find where their code failed. Every other frame goes.
_STUDENT_FRAME = re.compile(r'^\s*File "(?:[^"]*/)?(?P<path>cs336_systems/[^"]+\.py|adapters\.py)", line (?P<line>\d+)'
                            r'(?P<rest>, in [A-Za-z_][A-Za-z0-9_<>.]*)?\s*$')
_STUDENT_FRAME_SHORT = re.compile(r'^\s*(?:[^\s"]*/)?(?P<path>cs336_systems/\S+\.py|adapters\.py):(?P<line>\d+)(?::|$)')
_ESSENTIAL = ("shape", "dtype", "max abs error", "outside tolerance")  # kept when a message is cut
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.=+-]{1,80}")


@dataclass
class GradedTest:
    """One entry of results.json's ``tests``."""

    problem: Problem
    suite: str
    nodeid: str
    outcome: Verdict
    weight: float = 1.0
    max_score: float = 0.0

    @property
    def key(self) -> str:
        path, _, name = self.nodeid.partition("::")
        return f"{Path(path).name}::{name}" if name else Path(path).name

    @property
    def score(self) -> float:
        return self.max_score if self.outcome.status == "passed" else 0.0


def _file_of(nodeid: str) -> str:
    return Path(nodeid.split("::", 1)[0]).name


def collect_tests(manifest: Manifest, runs: list[SuiteRun], problems: list[Problem], complete: bool) -> list[GradedTest]:
    """All graded tests, with their share of their problem's points.

    Collection errors and suites that never started become failing tests of their files'
    problems. With ``complete`` (no -k/--problems filter), a problem that has points but no
    test at all gets one failing entry, so that its points are never silently dropped.
    """
    selected = {problem.name for problem in problems}
    tests: list[GradedTest] = []

    def add(suite: str, nodeid: str, outcome: Verdict) -> None:
        problem = manifest.problem_of_file(_file_of(nodeid))
        if problem is None or problem.name not in selected:
            return
        tests.append(GradedTest(problem, suite, nodeid, outcome))

    for run in runs:
        for nodeid, outcome in run.outcomes.items():
            add(run.name, nodeid, outcome)
        for nodeid, message in run.collect_errors:
            add(run.name, f"{nodeid}::<collection>", Verdict(
                f"{nodeid}::<collection>", "failed",
                "this test file failed to import in the grader (a kit error, not yours):\n" + message[-2000:]))
        if run.startup_failure is not None:
            for path in run.files:
                nodeid = f"{path}::<startup>"
                add(run.name, nodeid, Verdict(
                    nodeid, "failed", "the test process failed before running any test:\n" + run.startup_failure))
    if complete:
        have = {test.problem.name for test in tests}
        for problem in problems:
            if problem.points > 0 and problem.name not in have:
                nodeid = f"test_{problem.name}.py::<no tests>"
                tests.append(GradedTest(problem, "visible", nodeid, Verdict(
                    nodeid, "failed", f"the kit has no tests for {problem.name} (a kit error, not yours)")))
    for problem in problems:
        mine = [test for test in tests if test.problem.name == problem.name]
        for test in mine:
            test.weight = problem.weight_of(test.key)
        _apportion(mine, problem.points)
    order = {problem.name: index for index, problem in enumerate(manifest.problems)}
    tests.sort(key=lambda test: (order[test.problem.name], test.suite != "visible"))
    return tests


def _apportion(tests: list[GradedTest], points: float) -> None:
    """Share ``points`` among ``tests`` by weight, in the 1e-4 steps results.json shows, so that the
    shares add up to exactly ``points`` (largest remainders get the leftover steps): a submission
    that passes every test gets every point, not 9.9995 of 10."""
    total = sum(test.weight for test in tests)
    if total <= 0:
        for test in tests:
            test.max_score = 0.0
        return
    steps = round(points * 10_000)
    exact = [steps * test.weight / total for test in tests]
    shares = [math.floor(value) for value in exact]
    by_remainder = sorted(range(len(tests)), key=lambda i: exact[i] - shares[i], reverse=True)
    for index in by_remainder[: steps - sum(shares)]:
        shares[index] += 1
    for test, share in zip(tests, shares):
        test.max_score = share / 10_000


def rejected_tests(problems: list[Problem], message: str) -> list[GradedTest]:
    """One failing entry per problem with points, each worth all of them, for a submission that
    was refused before any test ran (a corrupt zip, or one over the limits); ``message`` says why."""
    tests = []
    for problem in problems:
        if problem.points > 0:
            nodeid = f"test_{problem.name}.py::<submission>"
            tests.append(GradedTest(problem, "visible", nodeid, Verdict(nodeid, "failed", message),
                                    max_score=problem.points))
    return tests


@dataclass(frozen=True)
class HiddenText:
    """What no output may show of the hidden tests (see ``hidden_text``)."""

    secrets: tuple[str, ...] = ()  # secret values: $CS336_HIDDEN_SEED and the default in the source
    seeds: frozenset[int] = frozenset()  # what hidden_seed(label) gives each label found, and +1, +2
    labels: tuple[re.Pattern, ...] = ()  # the case labels passed to hidden_seed / hidden_case
    fragments: tuple[str, ...] = ()  # docstring and source lines, whitespace-collapsed, lower case


def _hidden_seed(secret: str, label: str) -> int:
    """autograder/hidden_tests/flash_hidden_checks.py's hidden_seed, for a given secret."""
    digest = hashlib.sha256(f"{secret}/{label}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


def _label_forms(node: ast.expr, words: list[str]) -> tuple[re.Pattern | None, list[str]]:
    """A label argument as a pattern and its possible values (an f-string's fields are filled
    with ``words``, the short constants of its module)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        pieces = [[node.value]]
    elif isinstance(node, ast.JoinedStr):
        pieces = [[part.value] if isinstance(part, ast.Constant) else words for part in node.values]
    else:
        return None, []
    pattern = "".join(re.escape(piece[0]) if piece is not words else r"[\w.+-]*" for piece in pieces)
    values = ["".join(combo) for combo in itertools.islice(itertools.product(*pieces), 10_000)]
    return re.compile(rf"(?<![\w-]){pattern}(?![\w-])"), values


def hidden_text(folder: Path = HIDDEN_TESTS, secret: str | None = None) -> HiddenText:
    """Gather from the hidden tests' files (``*.py`` in ``folder``) what must never be shown.

    ``secret`` is the seed secret in use (default: ``$CS336_HIDDEN_SEED``, else the default that
    the source assigns to a ``*SECRET*`` name). Files that cannot be read or parsed add nothing.
    Read once per folder and secret.
    """
    return _hidden_text(Path(folder), secret if secret is not None else os.environ.get(SEED_ENV, ""))


@functools.lru_cache(maxsize=8)
def _hidden_text(folder: Path, secret: str) -> HiddenText:
    defaults, label_nodes, fragments = [], [], set()
    for path in sorted(Path(folder).glob("*.py")):
        try:
            source = path.read_text()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for line in source.splitlines():
            line = " ".join(line.split())
            if len(line) >= _MIN_SOURCE_LINE_CHARS:
                fragments.add(line.lower())
        words = sorted({str(constant.value) for node in ast.walk(tree) if isinstance(node, (ast.Tuple, ast.List))
                        for constant in node.elts if isinstance(constant, ast.Constant)
                        and isinstance(constant.value, (str, bool, int)) and len(str(constant.value)) <= 24})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for line in (ast.get_docstring(node) or "").splitlines():
                    if len(line.strip()) >= _MIN_DOC_LINE_CHARS:
                        fragments.add(" ".join(line.split()).lower())
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
                if any("SECRET" in name.upper() for name in names) and isinstance(node.value.value, str):
                    defaults.append(node.value.value)
            elif isinstance(node, ast.Call) and _call_name(node) in ("hidden_seed", "hidden_case") and node.args:
                label_nodes.append(_label_forms(node.args[0], words))
    in_use = secret or (defaults[0] if defaults else "")
    secrets = {value for value in (secret, *defaults) if value and len(value) >= _MIN_SECRET_CHARS}
    labels, seeds = [], set()
    for pattern, values in label_nodes:
        if pattern is not None:
            labels.append(pattern)
        for value in values if in_use else ():
            seed = _hidden_seed(in_use, value)
            seeds.update((seed, seed + 1, seed + 2))
    return HiddenText(tuple(sorted(secrets, key=len, reverse=True)), frozenset(seeds),
                      tuple({pattern.pattern: pattern for pattern in labels}.values()),
                      tuple(sorted(fragments, key=len, reverse=True)))


def redact_secrets(text: str, hidden: HiddenText) -> str:
    """``text`` with every secret value and every hidden seed replaced by ``<hidden>``."""
    for secret in hidden.secrets:
        text = text.replace(secret, HIDDEN)
    if hidden.seeds:
        text = re.sub(r"(?<!\d)\d{4,10}(?!\d)",
                      lambda match: HIDDEN if int(match.group()) in hidden.seeds else match.group(), text)
    return text


def redact_hidden(message: str, hidden: HiddenText) -> str:
    """A hidden test's failure message as a student may see it (see the module docstring).

    Traceback lines go, except the frames in the submission's own files (``cs336_systems/...``,
    ``adapters.py``: shown as that path, line and function, with the line of their code); then the secrets and seeds, any docstring or source line of the hidden
    tests (matched ignoring case and spacing), the case labels and the digits after ``seed``
    are replaced by ``<hidden>``. Everything else is kept, so the assertion helpers' account of
    the error (shape, dtype, tolerance, largest errors, count of bad elements) survives.
    """
    lines, after_file, after_student = [], False, False
    for line in message.splitlines():
        is_file = bool(re.match(r'^\s*File ".*", line \d+', line))
        student = _STUDENT_FRAME.match(line)
        short = _STUDENT_FRAME_SHORT.match(line)
        if student:
            lines.append(f'  File "{student["path"]}", line {student["line"]}{student["rest"] or ""}')
            after_file, after_student = False, True
            continue
        if short:
            lines.append(f'  {short["path"]}:{short["line"]}')
            after_file = after_student = False
            continue
        if after_student and line.startswith("    ") and not _TRACEBACK.match(line):
            lines.append("    " + line.strip())  # the submission's own source line
            after_student = False
            continue
        after_student = False
        if _TRACEBACK.match(line) or (after_file and line.startswith("    ")):
            after_file = is_file
            continue
        after_file = False
        lines.append(line)
    text = redact_secrets("\n".join(lines), hidden)
    for fragment in hidden.fragments:
        if fragment in " ".join(text.split()).lower():
            pattern = r"\s+".join(re.escape(word) for word in fragment.split())
            text = re.sub(pattern, HIDDEN, text, flags=re.IGNORECASE)
    for label in hidden.labels:
        text = label.sub(HIDDEN, text)
    return _SEED_VALUE.sub(lambda match: match.group(1) + HIDDEN, text)


def shown_key(test: GradedTest, hidden: HiddenText) -> str:
    """The test's ``file::name[id]`` as shown: a hidden test's parametrize id only when it is a
    plain word that gives nothing hidden away, else ``[<hidden>]``."""
    return shown_nodeid(test.key, "hidden" if test.suite == "hidden" else test.suite, hidden)


def shown_nodeid(nodeid: str, suite: str, hidden: HiddenText) -> str:
    """``nodeid`` as it may be printed for a test of ``suite`` (see ``shown_key``)."""
    if not suite.startswith("hidden") or not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    base, _, param = nodeid[:-1].partition("[")
    plain = _PLAIN_ID.fullmatch(param) and redact_hidden(param, hidden) == param
    return nodeid if plain else f"{base}[{HIDDEN}]"


def slowest_line(runs, manifest: Manifest, count: int = 5) -> str | None:
    """The output's "Slowest tests" line, or None when no test took a second. A student sees this
    line at once, before any hidden test is published, so a hidden test is named only by its
    problem ("a hidden test of flash_backward"), never by its file, name or parameters."""
    slowest = sorted(((outcome, run.name) for run in runs for outcome in run.outcomes.values()),
                     key=lambda pair: -pair[0].duration)[:count]
    if not slowest or slowest[0][0].duration < 1.0:
        return None
    shown = []
    for outcome, suite in slowest:
        if suite.startswith("hidden"):
            problem = manifest.problem_of_file(outcome.nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
            name = f"a hidden test of {problem.name if problem else 'a problem'}"
        else:
            name = outcome.nodeid.rsplit("/", 1)[-1]
        shown.append(f"{name} {outcome.duration:.1f} s")
    return "Slowest tests: " + "; ".join(shown)


def _rounded(value: float) -> float:
    return math.floor(value * 10_000 + 0.5) / 10_000


def _cut(message: str, limit: int) -> str:
    """``message`` in at most ``limit`` characters, keeping what says how large the error is.

    A first line (an assertion's context) longer than half the limit is shortened, then lines
    after it are dropped from the end, except those naming the shape, dtype, largest error or
    count of bad elements (``_ESSENTIAL``); whatever is still too long is cut at the end.
    """
    if len(message) <= limit:
        return message
    first, *rest = message.split("\n")
    lines = [first if len(first) <= limit // 2 else first[: limit // 2 - 3] + "...", *rest]
    while len("\n".join(lines)) > limit:
        spare = [index for index in range(len(lines) - 1, 0, -1)
                 if not any(word in lines[index] for word in _ESSENTIAL)]
        if not spare:
            break
        del lines[spare[0]]
    message = "\n".join(lines)
    return message if len(message) <= limit else message[: limit - 3] + "..."


def entry_output(test: GradedTest, hidden_chars: int, hidden: HiddenText | None = None) -> str:
    """What results.json shows of one test: its message (redacted and cut short for a hidden
    test, whose traceback text is never shown), or its message and traceback text."""
    hidden = hidden if hidden is not None else hidden_text()
    outcome = test.outcome
    if outcome.status == "passed":
        return "passed"
    if test.suite == "hidden":
        return _cut(redact_hidden(outcome.message or "failed", hidden), hidden_chars)
    message = outcome.message or "failed"
    if len(message) > _VISIBLE_OUTPUT_CHARS:
        message = message[: _VISIBLE_OUTPUT_CHARS - 3] + "..."
    detail = outcome.text.strip()
    if not detail or detail in message:
        return redact_secrets(message, hidden)
    room = max(500, _VISIBLE_OUTPUT_CHARS - len(message))
    return redact_secrets(f"{message}\n\n{head_and_tail(detail, room)}", hidden)


WHEN_SHOWN = {
    "after_published": "once grades are published",
    "after_due_date": "after the due date",
    "hidden": "never (only their points count)",
    "visible": "now",
}


def problem_points(tests: list[GradedTest]) -> dict[str, dict]:
    """Per problem: its section, points earned, points graded here, and points left for a GPU grade.

    Written to results.json's ``extra_data`` (Gradescope stores it and never shows it), where the
    batch grader reads each problem's points for the class CSV.
    """
    points: dict[str, dict] = {}
    for test in tests:
        entry = points.setdefault(test.problem.name, {"section": test.problem.section, "score": 0.0,
                                                      "max_score": 0.0, "gpu_later": 0.0})
        if test.outcome.status == "not_graded":
            entry["gpu_later"] += _rounded(test.max_score)
        else:  # rounded as the tests' entries are, so the problems add up to the score
            entry["score"] += _rounded(test.score)
            entry["max_score"] += _rounded(test.max_score)
    return {name: {key: _rounded(value) if isinstance(value, float) else value for key, value in entry.items()}
            for name, entry in points.items()}


def _summary(graded: list[GradedTest], pending: list[GradedTest], visibility: str, gpus_present: int) -> list[str]:
    """The lines at the top of results.json's ``output``: what a grade with (more) GPUs will add, and
    when the hidden tests show."""
    lines = []
    if pending:
        parts = []
        for name, entry in problem_points(pending).items():
            count = sum(test.problem.name == name for test in pending)
            parts.append(f"{entry['section']} {name} ({count} test{'s' * (count != 1)}, {entry['gpu_later']:.2f} points)")
        later = sum(test.max_score for test in pending)
        here = sum(test.max_score for test in graded)
        if gpus_present == 0:
            lines.append(f"This runner has no GPU. {later:.2f} points are graded on a GPU after the deadline and are "
                         f"not in this score: {'; '.join(parts)}. This score is out of the {here:.2f} points a CPU "
                         "runner can grade; the GPU grade replaces it with the full one.")
        else:
            lines.append(f"This runner has {gpus_present} GPU{'s' * (gpus_present != 1)}, fewer than some tests need "
                         f"(one process per GPU). {later:.2f} points are graded on a runner with enough GPUs after the "
                         f"deadline and are not in this score: {'; '.join(parts)}. This score is out of the "
                         f"{here:.2f} points this runner can grade; that grade replaces it with the full one.")
    hidden = [test for test in graded if test.suite == "hidden"]
    if hidden:
        points = sum(test.max_score for test in hidden)
        shown = WHEN_SHOWN.get(visibility, visibility)
        lines.append(f"{len(hidden)} hidden tests ({points:.2f} points) were graded and count in this score; "
                     f"their names and results show {shown}.")
    return lines


def results_json(tests: list[GradedTest], manifest: Manifest, *, execution_time: float, output: str,
                 leaderboard: list | None = None, gpus_present: int | None = None,
                 no_test_ran: str | None = None) -> dict:
    """The Gradescope results dict: score, execution_time, output, tests[], extra_data (and leaderboard).

    Tests that need a GPU on a runner without one (or more GPUs than ``gpus_present``, the
    runner's count) are not failures: they are left out of ``tests`` and out of ``score`` (the
    score is what this runner could grade), and the top of ``output`` names their problems and
    points. Hidden tests get the manifest's
    ``hidden_visibility`` (Gradescope's ``after_published`` by default), and ``output`` says how
    many there are and when they show. ``extra_data`` holds the per-problem points, and
    ``no_test_ran``: why no test could grade the submission (a corrupt zip, no adapters.py), which
    the batch grader lists apart from graded work.
    """
    hidden = hidden_text()
    visibility = manifest.settings.hidden_visibility
    graded = [test for test in tests if test.outcome.status != "not_graded"]
    pending = [test for test in tests if test.outcome.status == "not_graded"]
    entries = []
    for test in graded:
        entries.append({
            "name": f"{test.problem.section} {test.problem.name} [{test.suite}] {shown_key(test, hidden)}",
            "score": _rounded(test.score),
            "max_score": _rounded(test.max_score),
            "status": "passed" if test.outcome.status == "passed" else "failed",
            "output": entry_output(test, manifest.settings.hidden_output_chars, hidden),
            "visibility": visibility if test.suite == "hidden" else "visible",
        })
    summary = _summary(graded, pending, visibility, gpus_present or 0)
    result = {
        "score": _rounded(sum(entry["score"] for entry in entries)),  # the sum Gradescope shows, to the digit
        "execution_time": int(round(execution_time)),
        "output": redact_secrets("\n".join([*summary, *([""] if summary else []), output]), hidden),
        "tests": entries,
        "extra_data": {
            "problems": problem_points(tests),
            "gpu_later_points": _rounded(sum(test.max_score for test in pending)),
            "hidden_tests": sum(test.suite == "hidden" for test in graded),
            "hidden_visibility": visibility,
            **({"no_test_ran": no_test_ran} if no_test_ran else {}),
        },
    }
    if leaderboard:
        result["leaderboard"] = leaderboard
    return result


def write_results(path: Path, results: dict) -> None:
    """Write ``results`` atomically (a half-written file is never left behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".partial")
    temporary.write_text(json.dumps(results, indent=1))
    temporary.replace(path)


def leaderboard_entries(data) -> list:
    """Gradescope leaderboard entries from a JSON value: a list of {name, value[, order]} kept as is,
    or a {name: value} dict (lower is better)."""
    if isinstance(data, list):
        return [dict(entry) for entry in data if isinstance(entry, dict) and "name" in entry and "value" in entry]
    if isinstance(data, dict):
        return [{"name": str(name), "value": value, "order": "asc"} for name, value in data.items()]
    raise ValueError("the leaderboard JSON must be a list of {name, value} objects or a {name: value} object")


def format_table(tests: list[GradedTest], problems: list[Problem]) -> str:
    """A per-problem table: passed/total per suite, tests needing a GPU, points.

    The problem column is as wide as the longest name shown (at least 24), so columns stay aligned."""
    width = max([24, *(len(problem.name) + 2 for problem in problems)])
    header = f"{'section':<8}{'problem':<{width}}{'visible':>9}{'hidden':>9}{'needs GPU':>11}{'points':>15}"
    lines = [header, "-" * len(header)]
    total = maximum = gpu_points = 0.0
    for problem in problems:
        mine = [test for test in tests if test.problem.name == problem.name]
        if not mine and problem.points == 0:
            continue
        cells = []
        for suite in ("visible", "hidden"):
            graded = [test for test in mine if test.suite == suite and test.outcome.status != "not_graded"]
            passed = sum(test.outcome.status == "passed" for test in graded)
            cells.append(f"{passed}/{len(graded)}")
        gpu = [test for test in mine if test.outcome.status == "not_graded"]
        score = sum(test.score for test in mine)
        top = sum(test.max_score for test in mine)
        total, maximum = total + score, maximum + top
        gpu_points += sum(test.max_score for test in gpu)
        gradable_here = top - sum(test.max_score for test in gpu)
        mark = "  < lost points" if score + 1e-9 < gradable_here else ""
        lines.append(f"{problem.section:<8}{problem.name:<{width}}{cells[0]:>9}{cells[1]:>9}"
                     f"{(str(len(gpu)) if gpu else '-'):>11}{f'{score:.2f} / {top:.2f}':>15}{mark}")
    lines.append("-" * len(header))
    percent = 100.0 * total / maximum if maximum else 0.0
    lines.append(f"{'total':<{8 + width}}{'':>29}{f'{total:.2f} / {maximum:.2f}':>15}  ({percent:.1f}%)")
    if gpu_points > 0:
        gradable = maximum - gpu_points
        share = 100.0 * total / gradable if gradable else 0.0
        lines.append(f"{gpu_points:.2f} points need a GPU runner (or more GPUs) and were not graded here; "
                     f"of the {gradable:.2f} points graded here this submission earned {total:.2f} ({share:.1f}%)")
    return "\n".join(lines)
