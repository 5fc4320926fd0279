"""A fake Gradescope "Export Submissions" download, built from the kit's own fixtures.

Read by the batch selftests. Gradescope's export is a zip holding one folder
(``assignment_<id>_export/``) with ``submission_metadata.yml`` and a folder per submission,
``submission_<id>/``, holding the files the student uploaded (an uploaded zip that Gradescope
could not unpack stays a zip). The metadata is Ruby-flavoured YAML: keys start with a colon,
SIDs are quoted strings, a group submission lists several submitters.

    path = build_export(tmp_path)             # the zip; build_export(tmp_path, as_zip=False): the folder
    EXPECTED[submission_id]                   # what each submission is
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from fixtures import attacks, fairness, materialize, mutants

KIT = Path(__file__).resolve().parents[2]
EXPORT_DIR = "assignment_7354021_export"
FIXTURE_KINDS = {"mutant": mutants, "attack": attacks, "fairness": fairness}  # SUBMISSIONS' "KIND:NAME"

# submission folder -> (what it is, its submitters as (name, sid, email))
SUBMISSIONS = {
    "submission_281934011": ("reference", [("Ada Lovelace", "05550101", "ada@stanford.edu"),
                                           ("Charles Babbage", "05550102", "babbage@stanford.edu")]),
    "submission_281934022": ("stubs", [("Grace Hopper", "05550103", "hopper@stanford.edu")]),
    "submission_281934033": ("mutant:scale_applied_twice", [("Alan Turing", "05550104", "turing@stanford.edu")]),
    "submission_281934044": ("mutant:output_in_float32", [("Edsger Dijkstra", "05550105", "ewd@stanford.edu")]),
    "submission_281934055": ("attack:loosen_tolerances", [("Mallory Eve", "05550106", "mallory@stanford.edu")]),
    "submission_281934066": ("corrupt_zip", [("Barbara Liskov", "05550107", "liskov@stanford.edu")]),
    "submission_281934077": ("no_adapters", [("Ken Thompson", "05550108", "ken@stanford.edu")]),
}


def _metadata(submissions: dict) -> str:
    lines = []
    for index, (folder, (_, students)) in enumerate(submissions.items()):
        lines += [f"{folder}:", "  :submitters:"]
        for name, sid, email in students:
            lines += [f"  - :name: {name}", f"    :sid: '{sid}'", f"    :email: {email}"]
        lines += [f"  :created_at: 2026-05-0{1 + index % 3} 23:5{index}:01.000000000 -07:00", "  :score: 0.0",
                  "  :status: processed"]
    return "\n".join(lines) + "\n"


def _fill(kind: str, dest: Path, scratch: Path) -> None:
    if kind == "reference":
        shutil.copytree(KIT / "reference", dest, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    elif kind == "stubs":
        dest.mkdir(parents=True)
        shutil.copy(KIT / "adapters.py", dest / "adapters.py")
        shutil.copytree(KIT / "cs336_systems", dest / "cs336_systems", ignore=shutil.ignore_patterns("__pycache__"))
    elif kind.split(":", 1)[0] in FIXTURE_KINDS:  # "mutant:NAME", "attack:NAME", "fairness:NAME"
        catalog, name = kind.split(":", 1)
        materialize(FIXTURE_KINDS[catalog].get(name), dest)
    elif kind == "corrupt_zip":
        dest.mkdir(parents=True)
        good = scratch / "good.zip"
        with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(KIT / "reference" / "adapters.py", "adapters.py")
        (dest / "submission.zip").write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # truncated
    elif kind.startswith("path:"):  # a submission built elsewhere: its folder, or its zip as uploaded
        source = Path(kind[len("path:"):])
        if source.is_file():
            dest.mkdir(parents=True)
            shutil.copy(source, dest / "submission.zip")
        else:
            shutil.copytree(source, dest, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    elif kind == "no_adapters":  # the package alone, as a student who zipped the wrong folder would
        dest.mkdir(parents=True)
        shutil.copytree(KIT / "reference" / "cs336_systems", dest / "cs336_systems", symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        raise ValueError(kind)


def build_export(root: Path, as_zip: bool = True, only: list[str] | None = None,
                 extra: dict[str, tuple[str, list[tuple[str, str, str]]]] | None = None) -> Path:
    """Write the export under ``root``; return the zip (or, with ``as_zip=False``, its folder).
    ``only`` keeps just these submission folders; ``extra`` adds more, in ``SUBMISSIONS``' form."""
    root = Path(root)
    folder = root / "export" / EXPORT_DIR
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    chosen = {key: value for key, value in SUBMISSIONS.items() if only is None or key in only}
    chosen.update(extra or {})
    for name, (kind, _) in chosen.items():
        _fill(kind, folder / name, scratch)
    (folder / "submission_metadata.yml").write_text(_metadata(chosen))
    if not as_zip:
        return folder
    archive_path = root / f"{EXPORT_DIR}.zip"
    with zipfile.ZipFile(archive_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.parent.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder.parent).as_posix())
    return archive_path
