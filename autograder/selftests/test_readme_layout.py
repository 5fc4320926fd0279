"""The README's layout table matches the tree: every tracked top-level entry has a row (or is one of
the repository's own dot-files), and every path a row names exists. A folder added, renamed or
removed without its row fails here, naming it."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
# The repository's own files, which the layout table does not describe: CI, git, the README itself.
REPOSITORY_FILES = {".ci", ".gitignore", ".dockerignore", "README.md"}


def layout_paths(readme: str) -> list[str]:
    """The paths named in the first column of the README's "## Layout" table (``*`` globs kept)."""
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    paths = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            paths += [name.rstrip("/") for name in re.findall(r"`([^`]+)`", first_cell)]
    return paths


def tracked_top_level() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=KIT, capture_output=True, text=True, check=True).stdout
    return {line.split("/", 1)[0] for line in listed.splitlines() if line}


@pytest.mark.skipif(shutil.which("git") is None or not (KIT / ".git").exists(), reason="needs the kit's git checkout")
def test_every_top_level_entry_has_a_row_and_every_row_exists():
    paths = layout_paths((KIT / "README.md").read_text())
    assert paths, "README.md has no '## Layout' table"
    described = [path for path in paths if "/" not in path]
    missing_rows = sorted(name for name in tracked_top_level() - REPOSITORY_FILES
                          if not any(fnmatch.fnmatch(name, pattern) for pattern in described))
    assert not missing_rows, f"README.md's layout table has no row for {missing_rows}: add one (who reads it, what it is)"
    missing_paths = [path for path in paths if not list(KIT.glob(path))]
    assert not missing_paths, f"README.md's layout table names {missing_paths}, which the tree does not hold"


def test_the_table_reader_sees_every_path_of_a_row():
    readme = "## Layout\n\n| path | who |\n| --- | --- |\n| `a.py`, `b/` | students |\n| `c-*.txt` | staff |\n\n## Next\n| `d` | x |\n"
    assert layout_paths(readme) == ["a.py", "b", "c-*.txt"]
