"""Build the student release: the tree students clone, generated from this repo.

Read by staff before each offering; run ``python -m autograder release --out dist/student``.
The release holds exactly what a student needs (the lists are ``RELEASED`` and
``RELEASED_IN_PART`` below): the stubs, the adapters, the visible tests and their conftest, what runs
them (``harness/``, and ``executor/``, what runs beside the submission under ``pytest --isolate``), the
confinement modules the executor of ``pytest --isolate`` imports (``confine.EXECUTOR_FILES``;
the uid pool, the leaderboard's views and the threat model stay staff's), the handout, the setup and submission
scripts, a Linux container for machines where Triton does not install (``.devcontainer/``),
a student README and pyproject (whose ``pytest`` runs ``tests/`` with short tracebacks), and ``tests/points.toml``, what each visible test is worth for the local score
``python -m tests.score`` (autograder/student_points.py; no hidden test is named). It never
holds ``reference/``, ``autograder/`` (hidden tests, grader), ``fixtures/`` (mutants, attacks and
cheats, which would teach cheating) or ``leaderboard/``; autograder/selftests/test_release.py proves it
by path and by content.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from autograder.student_points import POINTS_FILE, points_toml, visible_points
from confine import EXECUTOR_FILES

KIT = Path(__file__).resolve().parent.parent
STUDENT_README = Path(__file__).resolve().parent / "student_readme.md"
RELEASED = ("adapters.py", "conftest.py", "constraints-cpu.txt", "constraints-gpu.txt", "make_submission.sh",
            "cs336_systems", "tests", "harness", "executor",
            "handout",
            ".devcontainer", ".dockerignore")  # the Linux container for students whose OS has no Triton
# Folders of which students get only the files named: the rest is staff's.
RELEASED_IN_PART = {"confine": EXECUTOR_FILES}
NEVER_RELEASED = ("reference", "autograder", "fixtures", "leaderboard", ".git", ".venv", ".ci")
SETUP_CUT_MARKER = "# --- kit only below"
_SKIPPED_NAMES = ("__pycache__", ".pytest_cache", ".hypothesis", "*.pyc", "*.egg-info", ".DS_Store")
_GITIGNORE = """.venv/
__pycache__/
*.pyc
*.egg-info/
.pytest_cache/
.hypothesis/
submission.zip
*.nsys-rep
*.sqlite
*.pickle
*.pt
results/
"""


class ReleaseError(RuntimeError):
    """The kit is not in a state that can be released (a file is missing or a marker moved)."""


def student_pyproject(text: str) -> str:
    """The kit's pyproject.toml with pytest's testpaths set to the visible tests only, short tracebacks,
    and no staff-only dependency (a line marked ``# staff:``)."""
    text = re.sub(r"(?m)^[^\n#]*# staff:[^\n]*\n", "", text)
    new, count = re.subn(r"(?m)^(#[^\n]*\n)*testpaths\s*=\s*\[[^\]]*\]",
                         '# Plain `pytest` runs the visible tests.\ntestpaths = ["tests"]', text)
    if count != 1:
        raise ReleaseError("pyproject.toml has no single `testpaths = [...]` line to rewrite for students")
    new, count = re.subn(r'(?m)^addopts\s*=\s*"([^"\n]*)"',
                         lambda match: "# Short tracebacks (the test's line and the message); `--tb=long` for all.\n"
                                       f'addopts = "{match.group(1)} --tb=short"', new)
    if count != 1:
        raise ReleaseError('pyproject.toml has no single `addopts = "..."` line to add --tb=short to for students')
    return new


def student_setup(text: str) -> str:
    """The kit's setup.sh cut at its kit-only marker, ending with what to do next instead."""
    if SETUP_CUT_MARKER not in text:
        raise ReleaseError(f"setup.sh has no line starting with {SETUP_CUT_MARKER!r} to cut the kit-only part at")
    head = text[: text.index(SETUP_CUT_MARKER)]
    lines = head.splitlines()
    body_start = next(i for i, line in enumerate(lines) if i > 0 and not line.startswith("#"))
    header = [
        lines[0],
        "# Set up the assignment in .venv: PyTorch, Triton and the test tools.",
        "#",
        "#   bash setup.sh            # first run: creates .venv (a few minutes)",
        "#   .venv/bin/pytest         # then run the visible tests",
        "#",
        "# On a machine without an NVIDIA GPU the CPU stack in constraints-cpu.txt is pinned; with one,",
        "# the tested GPU stack in constraints-gpu.txt. CS336_CONSTRAINTS=FILE picks another (none: no pins).",
        "# Triton has builds for Linux only: elsewhere (macOS, Windows) everything else is installed, and",
        "# the tests that need Triton are skipped with a note that says where to run them (README.md).",
    ]
    tail = ['echo "[setup] done. Run the tests with .venv/bin/pytest; submit with bash make_submission.sh"', ""]
    return "\n".join(header + lines[body_start:]).rstrip() + "\n" + "\n".join(tail)


def _copy_tree(source: Path, dest: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=False, ignore=shutil.ignore_patterns(*_SKIPPED_NAMES))
    else:
        shutil.copy2(source, dest, follow_symlinks=True)


def edition_files(kit: Path, edition: str) -> tuple[list[str], list[str]]:
    """(files of the kit that other editions' problems own: their stubs and visible tests; the rendered files).

    A file is another edition's when a problem of no edition but another names it in ``files``,
    or it is ``tests/test_<that problem>*.py``. The rendered files have edition blocks
    (``manifest.render_edition``): the handout and the adapters."""
    from autograder.manifest import editions, load_manifest

    path = kit / "autograder" / "manifest.toml"
    manifest = load_manifest(path, edition)
    mine = {file for problem in manifest.problems for file in problem.files}
    theirs: set[str] = set()
    for other in editions(path)["names"]:
        if other != edition:
            theirs |= {file for problem in load_manifest(path, other).problems for file in problem.files}
    owned = sorted(theirs - mine)
    owned += sorted(f"tests/{p.name}" for p in (kit / "tests").glob("test_*.py") if manifest.in_other_edition(p.name))
    return owned, ["handout/README.md", "adapters.py"]


def build_release(out: Path, *, kit: Path = KIT, force: bool = False, edition: str | None = None) -> Path:
    """Write the student tree of ``edition`` (default: the manifest's chosen one) to ``out`` (which must not
    exist unless ``force``); return ``out``."""
    from autograder.manifest import chosen_edition, render_edition

    edition = edition or chosen_edition(kit / "autograder" / "manifest.toml")
    out = Path(out)
    if out.exists():
        if not force:
            raise ReleaseError(f"{out} exists; pass --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in RELEASED:
        source = kit / name
        if not source.exists():
            raise ReleaseError(f"the kit has no {name}; the release needs it")
        _copy_tree(source, out / name)
    for folder, names in RELEASED_IN_PART.items():
        (out / folder).mkdir()
        for name in names:
            if not (kit / folder / name).is_file():
                raise ReleaseError(f"the kit has no {folder}/{name}; the release needs it")
            shutil.copy2(kit / folder / name, out / folder / name)
    owned, rendered = edition_files(kit, edition)
    for name in owned:
        (out / name).unlink(missing_ok=True)
    for name in rendered:
        (out / name).write_text(render_edition((kit / name).read_text(), edition))
    (out / "README.md").write_text(STUDENT_README.read_text())
    (out / "pyproject.toml").write_text(student_pyproject((kit / "pyproject.toml").read_text()))
    (out / POINTS_FILE).write_text(points_toml(visible_points(kit, edition)))  # for `python -m tests.score`
    (out / "setup.sh").write_text(student_setup((kit / "setup.sh").read_text()))
    (out / ".gitignore").write_text(_GITIGNORE)
    for script in ("setup.sh", "make_submission.sh"):
        (out / script).chmod(0o755)
    for name in NEVER_RELEASED:
        if (out / name).exists():
            raise ReleaseError(f"{name} reached the release; it must never")
    named = staff_names(out)
    if named:
        raise ReleaseError("the release names what students do not have (reword these lines):\n" + "\n".join(named))
    return out


# Names of what only staff have: the points manifest, the fixtures (mutants, attacks, cheats), the GPU acceptance runs
# and their records, the solution, the grader, the leaderboard's code and confine's staff-only
# files (the threat model, which names the attack fixtures, and the uid pool). Student-facing text must not send a
# student looking for them.
STAFF_ONLY_NAMES = re.compile(r"\bmanifest\b|\bfixtures/|mutant catalog|gpu_checks|\brecords/|\breference/|\bautograder/"
                              r"|\bautograder\.[a-z_]|\bleaderboard/|THREAT_MODEL|\buid_pool\b", re.IGNORECASE)
# Kit-only code paths that a released file may keep (they are never taken in the release).
_KIT_ONLY_CODE = re.compile(r'autograder\.student_points import|ROOT / "autograder" / "student_points\.py"')


def staff_names(out: Path) -> list[str]:
    """Every ``path:line: text`` of the release at ``out`` that names something only staff have."""
    found = []
    for path in sorted(Path(out).rglob("*")):
        if not path.is_file() or ".git" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if STAFF_ONLY_NAMES.search(line) and not _KIT_ONLY_CODE.search(line):
                found.append(f"{path.relative_to(out)}:{number}: {line.strip()[:160]}")
    return found
