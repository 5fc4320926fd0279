"""What each visible test is worth, for the students' local score (``python -m tests.score``).

Read by the release builder, which writes the result as ``tests/points.toml`` in the student
tree, and by tests/score.py in the kit itself (where no such file exists). The points come from
the manifest through the grader's own arithmetic (``scoring.collect_tests``): a problem's points
are shared by all of its tests, visible and hidden, by weight. So the test list is collected here
as the grader collects it, hidden tests included, in a subprocess (collection imports torch and
the test modules). What is written holds only problem names, sections and points, and for each
visible test its points and whether it needs a GPU: no hidden test's name, count or weight.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.student_points")

import json
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
POINTS_FILE = Path("tests") / "points.toml"  # in the student tree
COLLECT_TIMEOUT_S = 600


class PointsError(RuntimeError):
    """The tests could not be collected, so the points of the visible tests are unknown."""


def _collected(kit: Path, files: list[Path]) -> dict[str, bool]:
    """{node id: needs a GPU} for every test in ``files``, collected as the grader's test processes do."""
    with tempfile.TemporaryDirectory(prefix="cs336-points-") as folder:
        out = Path(folder) / "collected.json"
        command = [sys.executable, "-m", "autograder.student_points", "--collect", str(out), *map(str, files)]
        answer = subprocess.run(command, cwd=kit, capture_output=True, text=True, timeout=COLLECT_TIMEOUT_S)
        if answer.returncode != 0 or not out.exists():
            raise PointsError(f"collecting the tests to price them failed (exit {answer.returncode}):\n"
                              + (answer.stdout + answer.stderr)[-3000:])
        return json.loads(out.read_text())


def _priced(kit: Path, edition: str | None = None):
    """(every test, visible and hidden, with its max_score; {node id: needs a GPU}; the problems)."""
    from autograder.grade import SUITE_DIRS, _test_files
    from autograder.manifest import load_manifest
    from autograder.scoring import collect_tests
    from autograder.watchdog import SuiteRun, Verdict

    manifest = load_manifest(kit / "autograder" / "manifest.toml", edition)
    problems = list(manifest.problems)
    files, _ = _test_files(kit, manifest, tuple(SUITE_DIRS), problems)
    collected = _collected(kit, [path.relative_to(kit) for suite in SUITE_DIRS for path in files[suite]])
    runs = []
    for suite, folder in SUITE_DIRS.items():
        mine = {nodeid: Verdict(nodeid, "passed") for nodeid in collected
                if Path(nodeid.split("::", 1)[0]).parent == folder}
        runs.append(SuiteRun(name=suite, outcomes=mine))
    return collect_tests(manifest, runs, problems, complete=True), collected, problems


def gpu_only_points(kit: Path = KIT, edition: str | None = None) -> dict[str, float]:
    """Each problem's points held by tests marked ``gpu`` (visible and hidden): what a runner
    without a GPU cannot grade. The handout's points table states them (checked by a selftest)."""
    tests, collected, problems = _priced(kit, edition)
    points = {problem.name: 0.0 for problem in problems}
    for test in tests:
        if collected.get(test.nodeid):
            points[test.problem.name] += test.max_score
    return {name: round(value, 4) for name, value in points.items()}


def visible_points(kit: Path = KIT, edition: str | None = None) -> dict:
    """``{"problems": {name: {section, points, visible_points}}, "tests": {key: {problem, points, gpu}}}``.

    A test's key is ``"<file name>::<test name>"``, as in the grader's table; ``points`` is its
    ``max_score`` in results.json; ``gpu`` whether it is marked ``gpu`` (not graded on a CPU runner).
    """
    tests, collected, problems = _priced(kit, edition)
    visible = [test for test in tests if test.suite == "visible" and "<" not in test.nodeid]
    table = {"problems": {}, "tests": {}}
    for problem in problems:
        mine = [test for test in visible if test.problem.name == problem.name]
        if not mine and problem.points == 0:
            continue
        table["problems"][problem.name] = {"section": problem.section, "points": problem.points,
                                           "visible_points": sum(test.max_score for test in mine)}
    for test in visible:
        table["tests"][test.key] = {"problem": test.problem.name, "points": test.max_score,
                                    "gpu": bool(collected[test.nodeid])}
    return table


def _number(value: float) -> str:
    """A TOML float to the grader's 4 decimals, without float noise (1.9644, not 1.9643999999999997)."""
    return repr(round(float(value), 4))


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a TOML basic string for these names


def points_toml(table: dict) -> str:
    """The students' points file: a header that says what it is, then the problems and the tests."""
    lines = [
        "# Points of the visible tests, read by `python -m tests.score` (do not edit: the grader",
        "# uses its own copy). A problem's points are shared by its visible tests and the hidden",
        "# tests that the grader also runs; `visible_points` is the visible tests' share.",
        "# `gpu = true`: the test needs a CUDA GPU; a runner without one does not grade it.",
        "",
    ]
    for name, problem in table["problems"].items():
        lines += [f"[problems.{name}]", f"section = {_string(problem['section'])}",
                  f"points = {_number(problem['points'])}", f"visible_points = {_number(problem['visible_points'])}", ""]
    lines.append("[tests]")
    for key, test in table["tests"].items():
        lines.append(f"{_string(key)} = {{ problem = {_string(test['problem'])}, "
                     f"points = {_number(test['points'])}, gpu = {'true' if test['gpu'] else 'false'} }}")
    return "\n".join(lines) + "\n"


def _collect_main(out: str, files: list[str]) -> int:
    import pytest

    found: dict[str, bool] = {}

    class Recorder:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, items):
            found.update({item.nodeid: item.get_closest_marker("gpu") is not None for item in items})

    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-c", str(Path.cwd() / "autograder" / "grader_pytest.ini"),
                        "--rootdir", str(Path.cwd()), *files], plugins=[Recorder()])
    Path(out).write_text(json.dumps(found))
    return int(code)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--collect":
        sys.exit(_collect_main(sys.argv[2], sys.argv[3:]))
    if sys.argv[1:] == ["--gpu-only"]:  # the handout's GPU column: python -m autograder.student_points --gpu-only
        for name, value in gpu_only_points().items():
            print(f"{name} {value:.2f}")
        sys.exit(0)
    sys.stdout.write(points_toml(visible_points()))
