"""Gradescope's ``results.json``: what a grade writes for Gradescope and the batch grader to read.

Read by ``grade.py`` and ``__main__.py`` (which write it), by the batch grader (which reads the
per-problem points from ``extra_data``) and by staff changing what a student sees. Each graded
test is one entry of ``tests`` with its share of the points (``scoring.py``) and its output: a
visible test's message and traceback text, a hidden test's message only, redacted
(``redaction.py``) and cut short. A test that needs a GPU on a runner without one, or two GPUs
on a runner with one, is not a failure: results.json leaves it out of ``tests`` and ``score``
and says at the top of ``output`` which problems and points a grade with enough GPUs adds (the
console table, ``score_table.py``, still counts them, under "needs GPU").
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.manifest import Manifest
from autograder.pytest_plugin import head_and_tail
from autograder.redaction import HiddenText, hidden_text, redact_hidden, redact_secrets, shown_key
from autograder.scoring import GradedTest, problem_points, rounded

_VISIBLE_OUTPUT_CHARS = 4000
_ESSENTIAL = ("shape", "dtype", "max abs error", "outside tolerance")  # kept when a message is cut


def slowest_line(runs, manifest: Manifest, count: int = 5) -> str | None:
    """The output's "Slowest tests" lines (a heading, then a test a line), or None when no test
    took a second. A student sees these lines at once, before any hidden test is published, so a hidden test is named only by its
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
    return "Slowest tests:\n" + "\n".join(f"  {line}" for line in shown)


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
            "score": rounded(test.score),
            "max_score": rounded(test.max_score),
            "status": "passed" if test.outcome.status == "passed" else "failed",
            "output": entry_output(test, manifest.settings.hidden_output_chars, hidden),
            "visibility": visibility if test.suite == "hidden" else "visible",
        })
    summary = _summary(graded, pending, visibility, gpus_present or 0)
    result = {
        "score": rounded(sum(entry["score"] for entry in entries)),  # the sum Gradescope shows, to the digit
        "execution_time": int(round(execution_time)),
        "output": redact_secrets("\n".join([*summary, *([""] if summary else []), output]), hidden),
        "tests": entries,
        "extra_data": {
            "problems": problem_points(tests),
            "gpu_later_points": rounded(sum(test.max_score for test in pending)),
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
