"""The student release holds what students need and nothing staff-only, by path and by content."""

from __future__ import annotations

import ast
import re
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from autograder.grade import GradeOptions, grade
from autograder.manifest import editions, load_manifest
from autograder.release import (NEVER_RELEASED, RELEASED, RELEASED_IN_PART, ReleaseError, build_release,
                                student_pyproject, student_setup)
from confine import EXECUTOR_FILES

KIT = Path(__file__).resolve().parents[2]


def _files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def _python_texts(root: Path) -> dict[Path, str]:
    return {path: path.read_text(errors="replace") for path in _files(root) if path.suffix in (".py", ".md", ".sh", ".toml", ".txt")}


def _function_bodies(tree: ast.AST) -> dict[str, str]:
    """{qualified name: normalised body (docstring dropped)} for functions of 3+ statements."""
    bodies = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]
            if len(body) >= 3:
                bodies[node.name] = ast.dump(ast.Module(body=body, type_ignores=[]))
    return bodies


def test_release_holds_exactly_the_student_files(student_release):
    top = sorted(path.name for path in student_release.iterdir() if path.name != "submission.zip")
    assert top == sorted([*RELEASED, *RELEASED_IN_PART, "README.md", "pyproject.toml", "setup.sh", ".gitignore"])
    for path in _files(student_release):
        relative = path.relative_to(student_release)
        assert relative.parts[0] not in NEVER_RELEASED, f"{relative} must never be released"
        assert "__pycache__" not in relative.parts and not path.is_symlink()


def test_release_holds_only_the_confinement_modules_the_executor_imports(student_release):
    """Students get confine's executor modules (``pytest --isolate`` runs the executor on their
    machine), never its threat model or uid pool."""
    released = sorted(path.name for path in (student_release / "confine").iterdir())
    assert released == sorted(EXECUTOR_FILES)
    staff = {path.name for path in (KIT / "confine").iterdir() if path.is_file()} - set(EXECUTOR_FILES)
    assert {"THREAT_MODEL.md", "uid_pool.py"} <= staff, staff


def test_release_executor_runs_from_the_released_files_alone(student_release, tmp_path):
    """``pytest --isolate`` in the release starts an executor from the released modules: a stub's
    NotImplementedError comes back from it (scored "not implemented"), not an ImportError or a
    dead executor (scored "failed")."""
    tree = tmp_path / "student"
    shutil.copytree(student_release, tree, symlinks=False)
    result = subprocess.run([sys.executable, "-m", "pytest", "--isolate", "-p", "no:cacheprovider", "-x",
                             "tests/test_flash_forward_pytorch.py", "-k", "not gpu", "--maxfail=1"],
                            cwd=tree, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert "(run in a separate executor process)" in output, output[-3000:]
    assert "1 not implemented in" in output and "failed" not in output, output[-3000:]


def test_no_reference_solution_reaches_the_release(student_release):
    shared = {path.name for path in (KIT / "cs336_systems").glob("*.py")
              if (KIT / "reference" / "cs336_systems" / path.name).is_symlink()}
    solution = {}
    for path in (KIT / "reference" / "cs336_systems").glob("*.py"):
        if path.name in shared or path.is_symlink():
            continue  # a provided file, the same for students
        stub = KIT / "cs336_systems" / path.name
        provided = set(_function_bodies(ast.parse(stub.read_text())).values()) if stub.is_file() else set()
        solution.update({f"{path.name}:{k}": v for k, v in _function_bodies(ast.parse(path.read_text())).items()
                         if v not in provided})  # code the stub provides too (a toy model, say) is no solution
    assert solution, "the reference has no solution functions to look for"
    released = {}
    for path in _files(student_release):
        if path.suffix == ".py":
            released.update({f"{path.relative_to(student_release)}:{k}": v
                             for k, v in _function_bodies(ast.parse(path.read_text())).items()})
    leaked = [(ref, rel) for ref, body in solution.items() for rel, other in released.items() if body == other]
    assert not leaked, f"reference function bodies found in the release: {leaked[:5]}"


def test_no_hidden_test_or_staff_text_reaches_the_release(student_release):
    visible_names = set()
    for path in (KIT / "tests").glob("*.py"):
        visible_names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
    hidden_names = set()
    for path in (KIT / "autograder" / "hidden_tests").glob("*.py"):
        hidden_names |= {n.name for n in ast.walk(ast.parse(path.read_text()))
                         if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    secret = {name for name in hidden_names - visible_names if len(name) > 12}
    hidden_files = {path.stem for path in (KIT / "autograder" / "hidden_tests").glob("test_*.py")}
    assert secret, "expected hidden test names to look for"
    for path, text in _python_texts(student_release).items():
        # whole identifiers: a hidden name may be the start of a visible one (`..._out` of `..._out_of_buckets`)
        found = sorted(name for name in secret | hidden_files if re.search(rf"\b{name}\b", text))
        assert not found, f"{path.relative_to(student_release)} mentions hidden tests {found[:5]}"


def test_release_pyproject_runs_the_visible_tests_only(student_release):
    text = (student_release / "pyproject.toml").read_text()
    assert 'testpaths = ["tests"]' in text and "autograder" not in text
    with pytest.raises(ReleaseError):
        student_pyproject("[tool.pytest.ini_options]\n")


def test_release_setup_does_not_grade_the_reference(student_release):
    text = (student_release / "setup.sh").read_text()
    assert "reference" not in text and "autograder" not in text and os.access(student_release / "setup.sh", os.X_OK)
    assert "pip install" in text
    with pytest.raises(ReleaseError):
        student_setup("#!/bin/bash\necho hi\n")


@pytest.fixture(scope="module")
def release_collection(student_release) -> subprocess.CompletedProcess:
    """``pytest --collect-only -q`` in the release, as a student's first ``pytest`` collects."""
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=student_release, capture_output=True, text=True, timeout=300)


def test_release_pytest_collects_without_errors(release_collection):
    result = release_collection
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " tests collected" in result.stdout or "tests collected" in result.stdout
    assert all(line.startswith("tests/") for line in result.stdout.splitlines() if "::" in line)


_BUDGET = KIT / "autograder" / "tools" / "student_budget.md"
_OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|not implemented|errors?|xfailed|xpassed)\b")


def test_student_budget_was_measured_on_todays_visible_tests(release_collection):
    """autograder/tools/student_budget.md states the student's loop (plain ``pytest`` on the stubs
    and on the reference); its runs must have run the visible tests a release holds today, or its
    times and counts (the issue found "127 not implemented" where there were 131) describe another
    suite. Remeasure with ``.venv/bin/python -m autograder.tools.student_budget --out
    autograder/tools/student_budget.md``."""
    collected = re.search(r"^(\d+) tests? collected", release_collection.stdout, re.MULTILINE)
    assert collected, release_collection.stdout[-2000:]
    rows = {cells[1].strip(): cells[-2] for line in _BUDGET.read_text().splitlines()
            if (cells := line.split("|")) and len(cells) > 6 and cells[1].strip() in ("stubs", "reference")}
    assert set(rows) == {"stubs", "reference"}, f"{_BUDGET.name} has no stubs and reference rows: {rows}"
    for run, result in rows.items():
        counted = sum(int(number) for number, _ in _OUTCOME.findall(result))
        assert counted == int(collected.group(1)), (
            f"{_BUDGET.relative_to(KIT)}'s {run} run counted {counted} tests ({result.strip()}); a release "
            f"collects {collected.group(1)} today: remeasure with .venv/bin/python -m autograder.tools.student_budget "
            "--out autograder/tools/student_budget.md")


def test_release_stubs_fail_only_with_not_implemented_error(stub_grade):
    """The release's stubs, graded through its own make_submission.sh zip: every visible test
    fails with NotImplementedError (the hidden ones too, see test_grader_submissions); tests that
    need a GPU are not in results.json on a CPU runner."""
    results = stub_grade[1]
    visible = [e for e in results["tests"] if "[visible]" in e["name"]]
    assert visible
    other = [(e["name"], e["output"][:200]) for e in visible
             if "NotImplementedError" not in e["output"]]
    assert not other, f"visible tests on the stubs failing for other reasons: {other[:5]}"


def test_submission_zip_holds_only_graded_files(student_release, stub_grade):
    names = zipfile.ZipFile(student_release / "submission.zip").namelist()
    assert "adapters.py" in names and "cs336_systems/__init__.py" in names
    data = (".json", ".toml", ".yaml", ".yml", ".txt", ".cfg")  # what the grader's sandbox copies
    assert all(name == "adapters.py" or (name.startswith("cs336_systems/") and name.endswith((".py", *data)))
               or name == "writeup.pdf" for name in names), names
    assert stub_grade[0].intake.left_out == [], "the grader must take every file of the zip"


def _visible_entries(results: dict) -> dict[str, dict]:
    """{"<file>::<test>": entry} for the visible tests of a results.json."""
    return {entry["name"].split(" [visible] ", 1)[1]: entry for entry in results["tests"] if " [visible] " in entry["name"]}


def test_release_points_file_prices_visible_tests_as_the_grader(student_release, reference_grade):
    """tests/points.toml (for `python -m tests.score`) gives each visible test the grader's max_score."""
    points = tomllib.loads((student_release / "tests" / "points.toml").read_text())
    entries = _visible_entries(reference_grade[1])
    assert entries and set(entries) <= set(points["tests"]), sorted(set(entries) - set(points["tests"]))[:5]
    wrong = [(key, entry["max_score"], points["tests"][key]["points"]) for key, entry in entries.items()
             if abs(entry["max_score"] - points["tests"][key]["points"]) > 1e-3]
    assert not wrong, f"visible tests priced differently by the grader and tests/points.toml: {wrong[:5]}"
    gpu = {key for key, test in points["tests"].items() if test["gpu"]}
    assert gpu and not gpu & set(entries), "GPU tests must be flagged (and are not graded on this CPU runner)"


def test_local_score_on_the_reference_equals_the_graders_visible_points(student_release, reference_grade, tmp_path):
    """`python -m tests.score` in a release holding the reference prints the grader's visible-test points."""
    import re

    tree = tmp_path / "student"
    shutil.copytree(student_release, tree, symlinks=False)
    shutil.rmtree(tree / "cs336_systems")
    shutil.copytree(KIT / "reference" / "cs336_systems", tree / "cs336_systems", symlinks=False)
    shutil.copy(KIT / "reference" / "adapters.py", tree / "adapters.py")
    result = subprocess.run([sys.executable, "-m", "tests.score", "-p", "no:cacheprovider"], cwd=tree,
                            capture_output=True, text=True, timeout=900)
    total = re.search(r"^total \(visible tests\)\s+([\d.]+) / ([\d.]+)", result.stdout, re.MULTILINE)
    assert total, result.stdout[-3000:] + result.stderr[-3000:]
    graded = sum(entry["score"] for entry in _visible_entries(reference_grade[1]).values())
    assert abs(float(total.group(1)) - graded) < 0.011, (
        f"local score {total.group(1)} but the grader gave the visible tests {graded:.2f}:\n{result.stdout[-3000:]}")
    assert "Hidden tests count too" in result.stdout and "Traceback" not in result.stdout


# -- each edition's release: its problems, its points, its stubs --

EDITION_POINTS = {"2025": (77, 30, 107), "2026": (93, 44, 137)}
"""Each edition's (autograded, staff-graded writeup, total) points, as its handout states them."""
NEW_IN_2026 = ("nested_checkpointing", "training_step")


@pytest.fixture(scope="module")
def edition_releases(tmp_path_factory) -> dict[str, Path]:
    """{edition: its student tree}, built by the release builder as ``release --edition`` does."""
    root = tmp_path_factory.mktemp("editions")
    return {edition: build_release(root / edition, edition=edition) for edition in EDITION_POINTS}


def test_every_edition_of_the_manifest_is_checked_here():
    assert sorted(editions()["names"]) == sorted(EDITION_POINTS) and editions()["default"] == "2025"


@pytest.mark.parametrize("edition", sorted(EDITION_POINTS))
def test_each_editions_release_states_its_points(edition, edition_releases):
    manifest = load_manifest(edition=edition)
    auto, writeup, total = EDITION_POINTS[edition]
    assert (manifest.total_points, manifest.writeup_points, manifest.stated_total) == (auto, writeup, total)
    handout = (edition_releases[edition] / "handout" / "README.md").read_text()
    assert not re.search(r"edition \d{4}|end edition", handout), "an edition block's marker reached the handout"
    flat = " ".join(handout.split())
    for statement in (f"The grader awards exactly these points, {auto} in all.",
                      f"**Writeup: {writeup} points, graded by staff, separate from the {auto} autograded points** "
                      f"({total} in all)",
                      f"## Written problems ({writeup} points, graded by staff)",
                      f"{writeup} points in all, separate from the {auto} points of the tests"):
        assert statement in flat, f"the {edition} handout must say: {statement}"
    other = {"2025": "2026", "2026": "2025"}[edition]
    for wrong in (f"exactly these points, {EDITION_POINTS[other][0]} in all", f"({EDITION_POINTS[other][2]} in all)"):
        assert wrong not in flat, f"the {edition} handout states the {other} edition's points: {wrong}"
    points = tomllib.loads((edition_releases[edition] / "tests" / "points.toml").read_text())
    assert {name: entry["points"] for name, entry in points["problems"].items()} == {
        problem.name: problem.points for problem in manifest.problems if problem.points}  # §2.7: no points, no tests
    assert {entry["problem"] for entry in points["tests"].values()} <= {problem.name for problem in manifest.problems}


@pytest.mark.parametrize("edition", sorted(EDITION_POINTS))
def test_each_editions_release_holds_its_problems_and_not_the_others(edition, edition_releases):
    tree, manifest = edition_releases[edition], load_manifest(edition=edition)
    handout = (tree / "handout" / "README.md").read_text()
    for problem in manifest.problems:
        assert f"### {problem.section} {problem.name} (" in handout, f"{edition}: no heading for {problem.name}"
        missing = [file for file in problem.files if not (tree / file).is_file()]
        assert not missing, f"the {edition} release lacks {problem.name}'s {missing}"
    adapters = (tree / "adapters.py").read_text()
    for name in NEW_IN_2026:
        mine = name in manifest.by_name
        assert (tree / "cs336_systems" / f"{name}.py").is_file() == mine
        assert (tree / "tests" / f"test_{name}.py").is_file() == mine
        assert (f" {name} (" in handout) == mine, f"the {edition} handout {'lacks' if mine else 'has'} {name}"
    assert ("def get_training_step(" in adapters) == ("training_step" in manifest.by_name)
    assert ("def run_nested_checkpoint_plan(" in adapters) == ("nested_checkpointing" in manifest.by_name)
    if edition == "2026":
        stub = (tree / "cs336_systems" / "training_step.py").read_text()
        assert "class TrainingStep" in stub and "§3.8" in stub and "raise not_implemented(" in stub


def test_the_editions_share_every_other_problem_as_it_is():
    """Apart from 2026's two new problems, both editions grade the same problems with the same
    points, files and test files: the default edition's full grades (``reference_grade``,
    ``stub_grade``) stand for the shared problems of both."""
    old, new = load_manifest(edition="2025"), load_manifest(edition="2026")
    assert set(new.by_name) - set(old.by_name) == set(NEW_IN_2026) and set(old.by_name) <= set(new.by_name)
    for name, problem in old.by_name.items():
        assert problem == new.by_name[name], f"{name} differs between the editions"


def test_the_2026_release_grades_its_new_problems_stubs_0_and_the_reference_in_full(edition_releases, tmp_path):
    """2026's own problems, graded under its manifest: the release's stubs score 0, every test
    failing with the stub's NotImplementedError naming its file and section; the reference scores
    every point. (The 2025 manifest does not know them.)"""
    manifest = load_manifest(edition="2026")
    graded = {}
    for name, submission in (("stubs", edition_releases["2026"]), ("reference", KIT / "reference")):
        report = grade(GradeOptions(submission=submission, out=tmp_path / name, problems=list(NEW_IN_2026),
                                    manifest=manifest, quiet=True))
        graded[name] = report.results["tests"]
    section = {name: manifest.by_name[name].section for name in NEW_IN_2026}
    assert {entry["name"].split()[1] for entry in graded["stubs"]} == set(NEW_IN_2026)
    for entry in graded["stubs"]:
        problem = entry["name"].split()[1]
        assert entry["score"] == 0 and "NotImplementedError" in entry["output"], (entry["name"], entry["output"][:300])
        assert f"cs336_systems/{manifest.by_name[problem].files[0].split('/')[-1]}" in entry["output"], entry["output"][:300]
        assert section[problem] in entry["output"], (entry["name"], entry["output"][:300])
    earned = sum(entry["score"] for entry in graded["reference"])
    assert abs(earned - 16) < 1e-6 and all(entry["score"] == entry["max_score"] for entry in graded["reference"]), [
        (entry["name"], entry["output"][:200]) for entry in graded["reference"] if entry["score"] < entry["max_score"]]
    with pytest.raises(SystemExit, match="unknown problem"):
        grade(GradeOptions(submission=KIT / "reference", out=tmp_path / "old", problems=["training_step"],
                           manifest=load_manifest(edition="2025"), quiet=True))
