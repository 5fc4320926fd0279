"""``leaderboard batch`` takes no course secret, and says so in one line when given one.

The grader's batch (``autograder batch --bundle ZIP`` or ``--secret``) must grade with the
course's secret; a TA who carries those flags over to ``leaderboard batch`` would otherwise get
argparse's usage and "unrecognized arguments", and might conclude the leaderboard draws its
inputs from that secret. It does not: each run's parent draws a fresh seed (leaderboard/parent.py).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from leaderboard.__main__ import main

KIT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag", ["--bundle", "--secret"])
def test_batch_refuses_a_course_secret_in_one_line(flag, tmp_path, capsys):
    export = tmp_path / "export.zip"  # never read: the refusal comes first
    assert main(["batch", str(export), "--out", str(tmp_path / "out"), "--cpu", flag, "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{flag} is refused" in err[0] and "no course secret" in err[0] and "autograder batch" in err[0], err[0]
    assert not (tmp_path / "out").exists(), "nothing ran"


def test_the_refusal_names_a_readme_section_that_exists():
    readme = (KIT / "leaderboard" / "README.md").read_text()
    assert "\n## The course secret\n" in readme
    section = readme.split("\n## The course secret\n", 1)[1].split("\n## ", 1)[0]
    assert "--bundle" in section and "seed" in section


def test_batch_help_does_not_offer_the_refused_flags():
    result = subprocess.run([sys.executable, "-m", "leaderboard", "batch", "--help"], cwd=KIT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--bundle" not in result.stdout and "--secret" not in result.stdout
