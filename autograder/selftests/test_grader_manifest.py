"""The points manifest is the one source of points: the handout agrees with it, every test maps to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.manifest import ManifestError, editions, load_manifest, render_edition

KIT = Path(__file__).resolve().parents[2]
MANIFEST = load_manifest(edition=editions()["default"])
EDITIONS = editions()["names"]
TOTALS = {"2025": (77, 30), "2026": (93, 44)}  # (autograded, staff-graded): 107 and 137 in all


def handout_text(edition: str) -> str:
    """handout/README.md as the students of ``edition`` get it."""
    return render_edition((KIT / "handout" / "README.md").read_text(), edition)


def handout_points_table(edition: str) -> list[tuple[str, str, float]]:
    """(section, problem, points) rows of ``edition``'s handout's points table."""
    rows = []
    for line in handout_text(edition).splitlines():
        match = re.match(r"^\|\s*(§[\d.]+)\s*\|\s*([a-z_0-9]+)\s*\|\s*([\d.]+)\s*\|", line)
        if match:
            rows.append((match.group(1), match.group(2), float(match.group(3))))
    return rows


@pytest.mark.parametrize("edition", EDITIONS)
def test_handout_points_table_matches_the_manifest(edition):
    table = handout_points_table(edition)
    manifest = [(problem.section, problem.name, problem.points) for problem in load_manifest(edition=edition).problems]
    assert table, "handout/README.md has no points table rows like '| §1.1 | name | 4 | ... |'"
    assert table == manifest, (
        "handout/README.md's points table and autograder/manifest.toml disagree (section, problem, points):\n"
        f"handout:  {table}\nmanifest: {manifest}"
    )


def handout_gpu_column(edition: str) -> tuple[dict[str, float], tuple[float, float] | None]:
    """({problem: its "GPU only" points}, (total points, total GPU-only points) of the total row)."""
    column, total = {}, None
    for line in handout_text(edition).splitlines():
        match = re.match(r"^\|\s*(§[\d.]+)\s*\|\s*([a-z_0-9]+)\s*\|\s*[\d.]+\s*\|\s*([\d.]+)\s*\|", line)
        if match:
            column[match.group(2)] = float(match.group(3))
        match = re.match(r"^\|\s*\|\s*total\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", line)
        if match:
            total = (float(match.group(1)), float(match.group(2)))
    return column, total


@pytest.mark.parametrize("edition", EDITIONS)
def test_handout_states_the_total_and_each_problems_gpu_only_points(edition):
    """The total row says the manifest's sum (77 in 2025, 93 in 2026), and each problem's "GPU only" points
    are what the grader's own arithmetic gives the tests marked gpu, visible and hidden (to 2 decimals)."""
    from autograder.student_points import gpu_only_points

    MANIFEST = load_manifest(edition=edition)
    column, total = handout_gpu_column(edition)
    expected = gpu_only_points(edition=edition)
    assert set(column) == {problem.name for problem in MANIFEST.problems}, (
        "handout/README.md's points table needs a GPU-only column for every problem: | §1.1 | name | 4 | 0.22 | ... |")
    wrong = {name: (column[name], round(expected[name], 2)) for name in column
             if abs(column[name] - round(expected[name], 2)) > 1e-9}
    assert not wrong, f"handout GPU-only points disagree with the tests marked gpu (handout, grader): {wrong}"
    assert total is not None, "handout/README.md's points table has no '| | total | 77 | <GPU-only points> |' row"
    assert total == (MANIFEST.total_points, round(sum(expected.values()), 2)), (total, MANIFEST.total_points)


@pytest.mark.parametrize("edition", EDITIONS)
def test_handout_section_headings_match_the_manifest(edition):
    text = handout_text(edition)
    for problem in load_manifest(edition=edition).problems:
        assert re.search(rf"^#+ {re.escape(problem.section)} {problem.name}\b", text, re.M), (
            f"handout/README.md has no heading '{problem.section} {problem.name}'"
        )


@pytest.mark.parametrize("folder", ["tests", "autograder/hidden_tests"])
def test_every_test_file_maps_to_a_problem(folder):
    """Every test file grades a problem of some edition; in each edition, its own or another's."""
    files = sorted((KIT / folder).glob("test_*.py"))
    manifests = [load_manifest(edition=edition) for edition in EDITIONS]
    unmapped = [path.name for path in files if path.name not in MANIFEST.settings.ungraded
                and not any(m.problem_of_file(path.name) for m in manifests)]
    for manifest in manifests:
        assert all(bool(manifest.problem_of_file(p.name)) != manifest.in_other_edition(p.name) for p in files
                   if p.name not in manifest.settings.ungraded), f"{manifest.edition}: a file both graded and skipped"
    assert not unmapped, f"{folder}: test files named after no problem of the manifest: {unmapped}"


@pytest.mark.parametrize("edition", EDITIONS)
def test_every_graded_problem_has_visible_and_hidden_tests(edition):
    MANIFEST = load_manifest(edition=edition)
    missing = []
    for problem in MANIFEST.problems:
        if problem.points == 0:
            continue
        for folder in ("tests", "autograder/hidden_tests"):
            if not any(MANIFEST.problem_of_file(p.name) == problem for p in (KIT / folder).glob("test_*.py")):
                missing.append(f"{folder}/test_{problem.name}*.py")
    assert not missing, f"problems with points but no tests: {missing}"


def test_problem_files_exist_in_the_stub_package():
    for problem in MANIFEST.problems:
        for file in problem.files:
            assert (KIT / file).is_file(), f"[problems.{problem.name}] names {file}, which the kit does not have"


def test_longest_problem_name_wins():
    assert MANIFEST.problem_of_file("test_flash_forward_triton_hidden.py").name == "flash_forward_triton"
    assert MANIFEST.problem_of_file("test_flash_backward.py").name == "flash_backward"
    assert MANIFEST.problem_of_file("test_flash_benchmarking.py").name == "flash_benchmarking"
    assert MANIFEST.problem_of_file("test_flashy.py") is None
    assert MANIFEST.problem_of_file("conftest.py") is None


def test_a_broken_manifest_is_refused_with_the_key_named(tmp_path):
    bad = tmp_path / "manifest.toml"
    bad.write_text('[problems.x]\nsection = "§1"\n')
    with pytest.raises(ManifestError, match="points"):
        load_manifest(bad)
    bad.write_text('[grading]\nhidden_visibility = "sometimes"\n[problems.x]\nsection = "§1"\npoints = 1\n')
    with pytest.raises(ManifestError, match="hidden_visibility"):
        load_manifest(bad)


FLASH = ["flash_forward_pytorch", "flash_forward_triton", "flash_backward"]


def test_a_gpu_grade_of_the_flashattention_problems_is_bounded_by_their_stated_time():
    """Issue 21: a FlashAttention grade of any submission ends within 240 s on one GPU. Its limit
    is the sum of the three problems' gpu_time_s, leaving time to kill what runs and write the
    results; a grade with a problem that states none, or on a CPU, keeps total_timeout_s."""
    total = MANIFEST.settings.total_timeout_s
    flash = MANIFEST.time_limit_s(FLASH, on_gpu=True)
    assert flash == sum(MANIFEST.by_name[name].gpu_time_s for name in FLASH) <= 240 - 10 < total
    assert MANIFEST.time_limit_s(FLASH[:1], on_gpu=True) == MANIFEST.by_name[FLASH[0]].gpu_time_s
    assert MANIFEST.time_limit_s(FLASH, on_gpu=False) == total
    assert MANIFEST.time_limit_s(FLASH + ["torch_compile"], on_gpu=True) == total
    assert MANIFEST.time_limit_s([p.name for p in MANIFEST.problems], on_gpu=True) == total


def test_a_grade_cut_by_its_limit_says_where_the_limit_came_from():
    from autograder.grade import GradeOptions, _limit_source

    flash = [MANIFEST.by_name[name] for name in FLASH]
    options = GradeOptions(submission=Path("."))
    assert _limit_source(options, MANIFEST, flash, on_gpu=True).endswith("gpu_time_s in autograder/manifest.toml")
    assert _limit_source(options, MANIFEST, flash, on_gpu=False).startswith("total_timeout_s")
    assert _limit_source(GradeOptions(submission=Path("."), total_timeout_s=60), MANIFEST, flash, True) == "--timeout"


def test_a_problems_gpu_time_never_raises_the_total_limit(tmp_path):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('[grading]\ntotal_timeout_s = 100\n[problems.a]\nsection = "§1"\npoints = 1\n'
                        'gpu_time_s = 80\n[problems.b]\nsection = "§2"\npoints = 1\ngpu_time_s = 80\n')
    loaded = load_manifest(manifest)
    assert loaded.time_limit_s(["a"], on_gpu=True) == 80
    assert loaded.time_limit_s(["a", "b"], on_gpu=True) == 100


def handout_writeup_table(edition: str) -> tuple[list[tuple[str, str, float]], float | None]:
    """([(problem, name, points)] of the edition's handout's writeup table, its "writeup total" points)."""
    rows, total = [], None
    for line in handout_text(edition).splitlines():
        match = re.match(r"^\|\s*(W\d+)\s*\|\s*([a-z_0-9]+)\s*\|\s*([\d.]+)\s*\|", line)
        if match:
            rows.append((match.group(1), match.group(2), float(match.group(3))))
        match = re.match(r"^\|\s*\|\s*writeup total\s*\|\s*([\d.]+)\s*\|", line)
        if match:
            total = float(match.group(1))
    return rows, total


@pytest.mark.parametrize("edition", EDITIONS)
def test_handout_writeup_points_match_the_manifest_and_stay_apart_from_the_autograded_points(edition):
    """The written problems are graded by staff: the handout's writeup table, its total, its sentence
    stating the scheme and each problem's heading agree with the manifest's [writeup] tables, and the
    autograded total stays what the tests carry: 77 + 30 = 107 in 2025, 93 + 44 = 137 in 2026, the
    edition's stated total."""
    MANIFEST = load_manifest(edition=edition)
    rows, total = handout_writeup_table(edition)
    manifest = [(problem.section, problem.name, problem.points) for problem in MANIFEST.writeup]
    assert manifest, "autograder/manifest.toml has no [writeup.*] tables"
    assert rows == manifest, f"handout writeup table and manifest disagree:\nhandout:  {rows}\nmanifest: {manifest}"
    assert total == MANIFEST.writeup_points, f"handout's '| | writeup total | N |' row says {total}"
    text = handout_text(edition)
    scheme = (f"Writeup: {MANIFEST.writeup_points:g} points, graded by staff, separate from the "
              f"{MANIFEST.total_points:g} autograded points")
    assert scheme in text, f"handout/README.md must state the scheme in these words: {scheme!r}"
    for problem in MANIFEST.writeup:
        heading = f"### {problem.section} {problem.name} ({problem.points:g} points, graded by staff)"
        assert heading in text, f"handout/README.md has no heading {heading!r}"
    assert (MANIFEST.total_points, MANIFEST.writeup_points) == TOTALS[edition], "an edition's points changed"
    assert MANIFEST.total_points + MANIFEST.writeup_points == MANIFEST.stated_total, (
        f"[editions.\"{edition}\"] total is {MANIFEST.stated_total}; its problems add up to "
        f"{MANIFEST.total_points + MANIFEST.writeup_points}")
    assert f"({MANIFEST.stated_total:g} in all)" in text, f"the {edition} handout must state its total"


def test_an_edition_block_must_close_and_an_unknown_edition_is_refused():
    assert render_edition("a\n<!-- edition 2026 -->\nb\n<!-- end edition -->\nc\n", "2025") == "a\nc\n"
    assert render_edition("a\n# edition 2026 ---\nb\n# end edition 2026 ---\n", "2026") == "a\nb\n"
    with pytest.raises(ManifestError, match="never ends"):
        render_edition("<!-- edition 2026 -->\nb\n", "2025")
    with pytest.raises(ManifestError, match="no edition '2024'"):
        load_manifest(edition="2024")


def test_handout_model_sizes_are_the_providers():
    """The written problems' size table is cs336_systems/model_sizes.py's, parameter counts included."""
    import torch

    from cs336_systems.model_sizes import MODEL_SIZES, build_model

    text = (KIT / "handout" / "README.md").read_text()
    for name, size in MODEL_SIZES.items():
        with torch.device("meta"):
            count = sum(parameter.numel() for parameter in build_model(name, device="meta").parameters())
        row = (f"| {name} | {size.d_model} | {size.d_ff} | {size.num_layers} | {size.num_heads} | "
               f"{count / 1e6:.1f}M |")
        assert row in text, f"handout/README.md's size table needs the row {row!r}"
