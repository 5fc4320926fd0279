"""Small text contracts of what students and staff receive: the student pyproject installs no
staff-only package, points.toml shows no float noise, the class histogram counts submissions."""

from __future__ import annotations

import tomllib
from pathlib import Path

from autograder.release import student_pyproject
from autograder.student_points import points_toml

KIT = Path(__file__).resolve().parents[2]


def test_the_student_pyproject_installs_no_staff_only_package():
    kit = (KIT / "pyproject.toml").read_text()
    assert "submitit" in kit and "pyyaml" in kit, "the kit itself needs them (batch grading)"
    student = tomllib.loads(student_pyproject(kit))
    names = " ".join(student["project"]["dependencies"])
    assert "submitit" not in names and "pyyaml" not in names, names
    assert "torch" in names and "hypothesis" in names


def test_points_toml_has_no_float_noise():
    table = {"problems": {"p": {"section": "§1", "points": 4.0, "visible_points": 0.1 + 0.2 + 1.6644}},
             "tests": {"test_p.py::t": {"problem": "p", "points": 1.9643999999999997, "gpu": False}}}
    text = points_toml(table)
    assert "1.9644" in text and "1.9643999" not in text and "1.9644000" not in text, text
    assert tomllib.loads(text)["tests"]["test_p.py::t"]["points"] == 1.9644


def test_the_histogram_counts_submissions(tmp_path):
    from autograder.batch.report import write_histograms

    markdown, png = write_histograms(tmp_path, {"p": [0.5, 1.0, 1.0]}, {"p": 1.0})
    assert "submissions per tenth" in markdown.read_text() and "students" not in markdown.read_text()
