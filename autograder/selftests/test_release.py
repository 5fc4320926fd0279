"""The student release holds what students need and nothing staff-only, by path and by content."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.release import NEVER_RELEASED, RELEASED, ReleaseError, build_release, student_pyproject, student_setup

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
    assert top == sorted([*RELEASED, "README.md", "pyproject.toml", "setup.sh", ".gitignore"])
    for path in _files(student_release):
        relative = path.relative_to(student_release)
        assert relative.parts[0] not in NEVER_RELEASED, f"{relative} must never be released"
        assert "__pycache__" not in relative.parts and not path.is_symlink()


def test_no_reference_solution_reaches_the_release(student_release):
    shared = {path.name for path in (KIT / "cs336_systems").glob("*.py")
              if (KIT / "reference" / "cs336_systems" / path.name).is_symlink()}
    solution = {}
    for path in (KIT / "reference" / "cs336_systems").glob("*.py"):
        if path.name in shared or path.is_symlink():
            continue  # a provided file, the same for students
        solution.update({f"{path.name}:{k}": v for k, v in _function_bodies(ast.parse(path.read_text())).items()})
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
        found = sorted(name for name in secret | hidden_files if name in text)
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


def test_release_pytest_collects_without_errors(student_release):
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                            cwd=student_release, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " tests collected" in result.stdout or "tests collected" in result.stdout
    assert all(line.startswith("tests/") for line in result.stdout.splitlines() if "::" in line)


def test_release_stubs_fail_only_with_not_implemented_error(stub_grade):
    """The release's stubs, graded through its own make_submission.sh zip: every visible test
    fails with NotImplementedError or needs a GPU (the hidden ones too, see test_grader_submissions)."""
    results = stub_grade[1]
    visible = [e for e in results["tests"] if "[visible]" in e["name"]]
    assert visible
    other = [(e["name"], e["output"][:200]) for e in visible
             if "NotImplementedError" not in e["output"] and not e["output"].startswith("not graded on this runner")]
    assert not other, f"visible tests on the stubs failing for other reasons: {other[:5]}"


def test_submission_zip_holds_only_graded_files(student_release, stub_grade):
    names = zipfile.ZipFile(student_release / "submission.zip").namelist()
    assert "adapters.py" in names and "cs336_systems/__init__.py" in names
    assert all(name == "adapters.py" or (name.startswith("cs336_systems/") and name.endswith(".py"))
               or name == "writeup.pdf" for name in names), names
    assert stub_grade[0].sandbox.left_out == [], "the grader must take every file of the zip"
