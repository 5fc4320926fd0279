"""Hostile and corrupt zips: bounded extraction, a clear verdict, a valid results.json, nothing outside the sandbox.

The zips are built here from the reference by fixtures/attacks/zips.py (the largest
is about 1 MB on disk). The catalog's zip_* attacks grade the same zips end to end in
test_grader_attacks.py; these tests are the fast ones: the sandbox alone, peak memory of a
process that extracts a bomb, and the command line's results.json for a refused zip.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from fixtures.attacks import zips
from autograder.manifest import load_manifest
from autograder.intake import SubmissionRejected, copy_submission
from autograder.selftests.gradescope_schema import problems_with
from harness.submission import MAX_DATA_BYTES, MAX_TOTAL_BYTES

KIT = Path(__file__).resolve().parents[2]
REFERENCE = KIT / "reference"
MEMORY_LIMIT_MB = 150  # peak resident memory of a process that extracts a bomb (about 25 MB is Python)

REJECTED = {  # builder: words the student must read
    "bomb": ["zip bomb", "nsys_profile.py"],
    "size_lie": ["your zip is corrupt", "more bytes than its header says"],
    "bad_crc": ["your zip is corrupt", "bad CRC-32 for cs336_systems/nsys_profile.py"],
    "truncated": ["your zip is corrupt", "cut short"],
    "not_a_zip": ["your zip is corrupt", "not a zip file"],
    "bad_header": ["your zip is corrupt", "bad header"],
    "bzip2": ["bzip2"],
    "many_entries": ["entries, more than the 5000 allowed"],
    "huge_directory": ["list of files takes"],
}


def _files(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


@pytest.mark.parametrize("builder", sorted(REJECTED))
def test_a_hostile_zip_is_refused_with_the_reason_and_the_fix(tmp_path, builder):
    archive = zips.BUILDERS[builder](REFERENCE, tmp_path / "submission.zip")
    with pytest.raises(SubmissionRejected) as caught:
        copy_submission(archive, tmp_path / "box")
    message = str(caught.value)
    for words in REJECTED[builder]:
        assert words in message, message
    assert "bash make_submission.sh" in message, message
    assert _files(tmp_path / "box") == [], "a refused zip must leave the sandbox empty"
    assert caught.value.report is not None and caught.value.report.copied == []


def test_a_bomb_is_extracted_in_bounded_memory(tmp_path):
    """The size-lying zip is the one that is actually inflated (its headers pass every check);
    the honest bomb is refused by its headers. Peak memory of each extraction stays small.

    Peak memory is the child's own high-water mark (VmHWM): getrusage's maxrss would include the
    memory of this pytest process, which Linux carries over into a child across exec.
    """
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc to read a process's peak memory")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from autograder.intake import SubmissionRejected, copy_submission\n"
        "try:\n"
        "    copy_submission(Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "except SubmissionRejected as error:\n"
        "    print('rejected:', error)\n"
        "peak = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
        "print('maxrss_kb', peak.split()[1])\n"
    )
    for builder in ("size_lie", "bomb", "bzip2"):
        archive = zips.BUILDERS[builder](REFERENCE, tmp_path / f"{builder}.zip")
        done = subprocess.run([sys.executable, "-c", script, str(archive), str(tmp_path / f"box-{builder}")],
                              capture_output=True, text=True, cwd=KIT, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "rejected:" in done.stdout, done.stdout
        peak_mb = int(done.stdout.split("maxrss_kb")[1]) / 1024
        assert peak_mb < MEMORY_LIMIT_MB, f"{builder}: extraction peaked at {peak_mb:.0f} MB"
        assert _files(tmp_path / f"box-{builder}") == []


def test_an_entry_that_inflates_past_its_ratio_is_stopped_while_streaming(tmp_path):
    """Headers that pass every check (1.5 MiB, compressed size padded to 100 KB) over a stream
    of zeros that really is 1 KB: caught by the bytes actually read, not by the headers."""
    entry = zips.zero_bomb(zips.TARGET, 1)
    content = bytes(3 * zips.MiB // 2)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = compressor.compress(content) + compressor.flush()
    entry = zips.Entry(zips.TARGET, stream + bytes(100_000 - len(stream)), len(content), zlib.crc32(content))
    archive = zips.write_zip(tmp_path / "ratio.zip", zips._replace(zips.submission_entries(REFERENCE), entry))
    with pytest.raises(SubmissionRejected, match="zip bomb"):
        copy_submission(archive, tmp_path / "box")
    assert _files(tmp_path / "box") == []


def test_honest_files_over_the_total_are_refused_before_any_is_written(tmp_path):
    blob = os.urandom(2 * zips.MiB - 1)
    stored = [zips.Entry(f"cs336_systems/blob{index}.py", blob, len(blob), zlib.crc32(blob), method=zipfile.ZIP_STORED)
              for index in range(MAX_TOTAL_BYTES // len(blob) + 1)]
    archive = zips.write_zip(tmp_path / "big.zip", zips.submission_entries(REFERENCE) + stored)
    with pytest.raises(SubmissionRejected, match="expands to more than 20 MB"):
        copy_submission(archive, tmp_path / "box")
    assert _files(tmp_path / "box") == []


def test_absurd_paths_are_left_out_and_nothing_is_written_outside_the_sandbox(tmp_path):
    (tmp_path / "upload").mkdir()
    archive = zips.absurd_paths(REFERENCE, tmp_path / "upload" / "submission.zip")
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    before = _files(tmp_path)
    report = copy_submission(archive, work / "box")
    written = sorted(set(_files(tmp_path)) - set(before))
    assert all(name.startswith("a/b/c/box/") for name in written), written
    assert _files(work / "box") == sorted(entry.name for entry in zips.submission_entries(REFERENCE))
    for name in ("/tmp/escape_deep.py", "/tmp/absolute_escape.py", str(tmp_path / "upload" / "escape.py"),
                 str(tmp_path / "escape.py"), str(work / "escape.py")):
        assert not Path(name).exists(), name
    left = "\n".join(report.left_out)
    assert left.count("unsafe path") == 8, left
    assert "a second entry of the same name" in left and "cannot be written" in left, left
    original = (REFERENCE / "cs336_systems" / "nsys_profile.py").read_bytes()
    assert (work / "box" / "cs336_systems" / "nsys_profile.py").read_bytes() == original, "the first entry wins"


def test_small_data_files_are_copied_as_data_and_listed(tmp_path):
    archive = zips.data_files(REFERENCE, tmp_path / "submission.zip")
    report = copy_submission(archive, tmp_path / "box")
    for name, content in zips.DATA_FILES.items():
        path = tmp_path / "box" / name
        assert path.read_bytes() == content, name
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, name
    assert sorted(report.data_files) == sorted(zips.DATA_FILES)
    assert "tiles.json" in report.summary()
    for name in zips.REFUSED_DATA:
        assert not (tmp_path / "box" / name).exists(), name
        assert any(line.startswith(name.split("/", 1)[1]) or line.startswith(name) for line in report.left_out), name
    assert len(zips.REFUSED_DATA["cs336_systems/huge.json"]) > MAX_DATA_BYTES


def test_data_files_in_a_folder_submission(tmp_path):
    (tmp_path / "sub" / "cs336_systems").mkdir(parents=True)
    (tmp_path / "sub" / "adapters.py").write_text("import json, pathlib\n")
    (tmp_path / "sub" / "cs336_systems" / "__init__.py").write_text("")
    (tmp_path / "sub" / "cs336_systems" / "tiles.json").write_text('{"BLOCK_Q": 64}')
    (tmp_path / "sub" / "cs336_systems" / "run.sh").write_text("echo hi")
    os.chmod(tmp_path / "sub" / "cs336_systems" / "tiles.json", 0o755)
    report = copy_submission(tmp_path / "sub", tmp_path / "box")
    copied = tmp_path / "box" / "cs336_systems" / "tiles.json"
    assert copied.read_text() == '{"BLOCK_Q": 64}' and stat.S_IMODE(copied.stat().st_mode) == 0o644
    assert report.data_files == ["cs336_systems/tiles.json"]
    assert any(line.startswith("cs336_systems/run.sh") for line in report.left_out)


def test_zips_from_other_writers_still_extract(tmp_path):
    """Data descriptors (a zip written to a pipe), zip64 headers and stored entries are all fine."""
    files = {"adapters.py": b"X = 1\n", "cs336_systems/__init__.py": b"", "cs336_systems/k.py": b"Y = 2\n" * 1000}

    class Unseekable(io.RawIOBase):
        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, chunk):
            self.data += chunk
            return len(chunk)

    for kind in ("descriptor", "zip64", "stored"):
        sink = Unseekable()
        method = zipfile.ZIP_STORED if kind == "stored" else zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(sink if kind == "descriptor" else tmp_path / f"{kind}.zip", "w", method) as archive:
            for name, content in files.items():
                with archive.open(name, "w", force_zip64=kind == "zip64") as entry:
                    entry.write(content)
        if kind == "descriptor":
            (tmp_path / f"{kind}.zip").write_bytes(bytes(sink.data))
        copy_submission(tmp_path / f"{kind}.zip", tmp_path / f"box-{kind}")
        for name, content in files.items():
            assert (tmp_path / f"box-{kind}" / name).read_bytes() == content, (kind, name)


@pytest.mark.parametrize("builder", ["bad_crc", "bomb"])
def test_a_refused_zip_still_gets_a_valid_results_json(tmp_path, capsys, builder):
    from autograder.__main__ import main

    archive = zips.BUILDERS[builder](REFERENCE, tmp_path / "submission.zip")
    status = main(["grade", str(archive), "--out", str(tmp_path / "out"), "-q"])
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert status == 0
    assert problems_with(results) == []
    assert results["score"] == 0 and results["tests"]
    assert all(test["status"] == "failed" and test["max_score"] > 0 for test in results["tests"])
    reason = REJECTED[builder][0]
    assert reason in results["output"] and all(reason in test["output"] for test in results["tests"])
    assert "grader failed" not in json.dumps(results)
    total = sum(test["max_score"] for test in results["tests"])
    assert total == pytest.approx(load_manifest().total_points), "every point stays in max_score"


def test_a_solution_that_reads_a_json_config_at_import_is_graded(tmp_path):
    from autograder.grade import GradeOptions, grade

    submission = tmp_path / "submission"
    shutil.copytree(REFERENCE, submission, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    module = submission / "cs336_systems" / "nsys_profile.py"
    module.write_text(module.read_text() + '\nimport json as _json, pathlib as _pathlib\n'
                      '_TILES = _json.loads(_pathlib.Path(__file__).with_name("tiles.json").read_text())\n'
                      'assert _TILES == {"BLOCK_Q": 64, "BLOCK_K": 64}, _TILES\n')
    entries = zips.submission_entries(submission)
    entries.append(zips.deflated("cs336_systems/tiles.json", zips.DATA_FILES["cs336_systems/tiles.json"]))
    archive = zips.write_zip(tmp_path / "submission.zip", entries)
    report = grade(GradeOptions(submission=archive, out=tmp_path / "out", quiet=True, jobs=1,
                                tests=["tests/test_nsys_profile.py::test_annotated_attention_pushes_the_three_ranges_in_order"]))
    assert [test["status"] for test in report.results["tests"]] == ["passed"], report.results["tests"][0]["output"]
    assert "tiles.json" in report.results["output"], "the data file is listed in the grade's output"
