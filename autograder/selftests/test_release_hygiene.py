"""The student release names nothing students do not have: the points manifest, the mutant
catalog, gpu_checks/, records/, reference/, autograder/, leaderboard/ or confine's staff-only files (autograder/release.py's
STAFF_ONLY_NAMES, checked by grepping every file of the built release)."""

from __future__ import annotations

from autograder.release import STAFF_ONLY_NAMES, staff_names


def test_the_release_names_no_staff_only_file(student_release):
    assert staff_names(student_release) == []


def test_the_check_finds_each_staff_only_name(tmp_path):
    lines = ["The grader reads points from one manifest.", "see fixtures/mutants/base",
             "bash gpu_checks/run.sh", "see records/2026-12-02-h200-evidence/", "diff against reference/adapters.py", "python -m autograder.tools.x",
             "the mutant catalog", "leaderboard/README.md", "confine/THREAT_MODEL.md", "from confine import uid_pool"]
    (tmp_path / "notes.md").write_text("\n".join(lines + ["a Gradescope autograder and a reference answer"]))
    found = staff_names(tmp_path)
    assert [entry.split(":", 2)[1] for entry in found] == [str(n) for n in range(1, len(lines) + 1)], found
    assert not STAFF_ONLY_NAMES.search("a Gradescope autograder and a reference answer")


def test_the_handout_tells_students_how_to_enter_the_leaderboard(student_release):
    handout = (student_release / "handout" / "README.md").read_text()
    section = handout.split("### §2.7 leaderboard (optional)", 1)[1].split("\n## ", 1)[0]
    for words in ("16384", "do_bench", "median", "refused", "side stream", "cach", "How to enter", "Gradescope"):
        assert words in section, words
