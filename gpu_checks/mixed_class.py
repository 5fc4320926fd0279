"""Grade a realistic class, one submission at a time, and write where each grade's time went.

Run from the repo root on a GPU machine, as root: ``python3 gpu_checks/mixed_class.py OUTDIR``.

Most submissions a class sends are wrong somewhere, and many autotune, so the grader's speed on
the reference alone says little (issue 39: on an H200, one-bug copies of a correct Triton backward
graded in up to 4.8 times the correct copy's time). The class (``CLASS``) is: a correct
FlashAttention-2 written differently from the reference (fixtures/mutants/base), six one-bug
copies of it (three forward, three backward), two autotuning submissions (one right, one whose
second backward config is wrong), a cheat (a "Triton" Function that is PyTorch), the stubs
students start from (the kit's own cs336_systems/), and a corrupt zip. ``--real DIR`` adds every
submission folder in DIR (for example CS336 checkouts, see gpu_checks/real_submissions.py).

Each is graded alone, on the FlashAttention problems by default (``--problems ""``: all), with
``--timeline``, into OUTDIR/<name>/. OUTDIR/summary.md gets the machine and software stack, and
one row per grade: wall seconds, the ratio to the correct copy's, points, tests failed, the test
charged most and its CPU seconds; rows are written as they come, so a run cut short keeps them.
Exit 1 when a one-bug copy's grade took over ``FACTOR`` times the correct copy's (issue 39's
acceptance bound), else 0; exit 2 on bad arguments.

``--batch`` grades the chosen members as a class is graded: one Gradescope export of them (each
student named after its member), one ``python -m autograder batch`` on one GPU with a course
secret and ``--partial`` (part 2's two-GPU points left out on a one-GPU machine), and a row per
submission from its batch.json and results.json; the tail gives the batch's wall time and rate.

``--cpu`` grades on this machine's CPU (Triton under the interpreter) instead of requiring a GPU;
``--dry`` builds every submission and writes the summary without grading (each grade is replaced
by a stand-in results.json and timeline), which autograder/selftests/test_mixed_class.py runs so
that this script cannot rot between GPU runs. ``--only NAME,NAME`` grades some of the class.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from autograder.batch.driver import RECORD  # noqa: E402
from autograder.selftests.fake_export import build_export  # noqa: E402
from fixtures import SCHEMA, load, materialize  # noqa: E402

FLASH_PROBLEMS = "flash_forward_pytorch,flash_forward_triton,flash_backward"
FACTOR = 1.5  # a one-bug copy's grade may take at most this many times the correct copy's
CORRECT = "correct_base"


@dataclass(frozen=True)
class Member:
    """One submission of the class: ``name`` (its folder under OUTDIR), ``kind`` (correct, one-bug,
    autotuning, cheat, stub, corrupt zip, real) and ``source``: a fixture folder from the kit root,
    "kit" for the kit's own stubs, or an absolute path to a submission folder."""

    name: str
    kind: str
    source: str


CLASS = (
    Member("reference", "correct (the reference)", "reference"),
    Member(CORRECT, "correct", "fixtures/mutants/base"),
    Member("scale_applied_twice", "one-bug (forward, PyTorch)", "fixtures/mutants/scale_applied_twice"),
    Member("causal_bottom_right", "one-bug (forward, Triton)", "fixtures/mutants/causal_bottom_right"),
    Member("no_key_bound_mask", "one-bug (forward, Triton)", "fixtures/mutants/no_key_bound_mask"),
    Member("backward_scale_one_over_d", "one-bug (backward, Triton)", "fixtures/mutants/backward_scale_one_over_d"),
    Member("backward_dO_treated_as_ones", "one-bug (backward, Triton)", "fixtures/mutants/backward_dO_treated_as_ones"),
    Member("delta_from_dO_only", "one-bug (backward, Triton)", "fixtures/mutants/delta_from_dO_only"),
    Member("autotuned_triton", "autotuning (right)", "fixtures/fairness/autotuned_triton"),
    Member("autotune_backward_grid_ignores_tile", "autotuning (one config wrong)",
           "fixtures/mutants/autotune_backward_grid_ignores_tile"),
    Member("triton_is_pytorch", "cheat", "fixtures/attacks/triton_is_pytorch"),
    Member("stubs", "stub", "kit"),
    Member("zip_bad_crc", "corrupt zip", "fixtures/attacks/zip_bad_crc"),
)


def build(member: Member, where: Path) -> Path:
    """The submission to grade: the kit itself for the stubs, a folder without FIXTURE.toml (a base,
    a real submission) as it is, else the fixture materialized under ``where`` (a zip for an
    archive fixture)."""
    if member.source == "kit":
        return KIT
    folder = Path(member.source) if Path(member.source).is_absolute() else KIT / member.source
    if not (folder / SCHEMA).is_file():  # a submission folder as it is: a base, a real one
        return folder
    return materialize(load(KIT / member.source), where / member.name)


def grade_command(submission: Path, out: Path, problems: str, cpu: bool) -> list[str]:
    """The grader's command line for one member: its problems, ``--timeline`` next to its results."""
    return [sys.executable, "-m", "autograder", "grade", str(submission), "--out", str(out),
            "--timeline", str(out / "timeline.jsonl"), "--verbose",
            *(["--problems", problems] if problems else []), *([] if cpu else ["--require-gpu"])]


def _stand_in(out: Path) -> None:
    """What ``--dry`` writes instead of grading: a results.json of one failed test, a timeline of it."""
    nodeid = "tests/test_flash_backward.py::test_flash_backward_triton_any_shape"
    (out / "results.json").write_text(json.dumps({"score": 0.0, "tests": [
        {"name": f"§2.5 flash_backward [visible] {nodeid.split('/')[-1]}", "score": 0.0, "max_score": 1.0,
         "status": "failed"}]}))
    (out / "timeline.jsonl").write_text("".join(json.dumps(event) + "\n" for event in (
        {"t": 0.0, "event": "start", "chain": "visible#0", "nodeid": nodeid},
        {"t": 1.0, "event": "end", "chain": "visible#0", "nodeid": nodeid, "cpu": 0.5})))


def grade(command: list[str], out: Path, dry: bool) -> tuple[float, dict]:
    """Run ``command`` (or, ``dry``, write its stand-in); its wall seconds and results.json."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if dry:
        _stand_in(out)
    else:
        with open(out / "grade.log", "w") as log:
            subprocess.run(command, cwd=KIT, stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = 0.0 if dry else time.monotonic() - started  # a stand-in's time means nothing: no ratio
    path = out / "results.json"
    return seconds, json.loads(path.read_text()) if path.exists() else {"score": 0.0, "tests": []}


def batch(members: list[Member], built: Path, out: Path, problems: str, cpu: bool, dry: bool) -> dict:
    """Grade ``members`` in one ``autograder batch`` run of one GPU (``cpu``: of the CPU; ``dry``: its
    ``--dry-run``): {member name: (seconds, results, folder)}, from each submission's batch.json and
    results.json in its folder of the batch's output."""
    ids = {member.name: f"submission_{9100001 + index}" for index, member in enumerate(members)}
    extra = {ids[member.name]: ("stubs" if member.source == "kit" else f"path:{build(member, built)}",
                                [(member.name, ids[member.name].split("_")[1], f"{member.name}@example.edu")])
             for member in members}
    export = build_export(out / "class", as_zip=False, only=[], extra=extra)
    with open(out / "batch.log", "w") as log:
        subprocess.run([sys.executable, "-m", "autograder", "batch", str(export), "--out", str(out / "batch"),
                        "--gpus", "0" if cpu else "1", "--problems", problems, "--partial",
                        "--secret", "mixed-class-course-secret", *(["--dry-run"] if dry else [])],
                       cwd=KIT, stdout=log, stderr=subprocess.STDOUT, check=False)
    graded = {}
    for name, key in ids.items():
        folder = out / "batch" / "submissions" / key
        record = json.loads((folder / RECORD).read_text()) if (folder / RECORD).exists() else {}
        results = json.loads((folder / "results.json").read_text()) if (folder / "results.json").exists() else {}
        graded[name] = (record.get("seconds") or 0.0, results, folder)
    return graded


def costliest(timeline: Path) -> tuple[str, float]:
    """(the test charged the most CPU seconds, those seconds) in a ``grade --timeline`` file;
    ("-", 0.0) when it has no ended test (a rejected zip runs none)."""
    ends = [json.loads(line) for line in timeline.read_text().splitlines()] if timeline.exists() else []
    ends = [event for event in ends if event.get("event") == "end" and event.get("cpu") is not None]
    if not ends:
        return "-", 0.0
    top = max(ends, key=lambda event: event["cpu"])
    return top["nodeid"].split("/")[-1], float(top["cpu"])


def stack(cpu: bool) -> list[str]:
    """Lines that say where the numbers come from: time, host, Python, torch, triton, GPU, load."""
    lines = [f"- date (UTC): {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             f"- host: {platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start",
             f"- python {platform.python_version()}"]
    try:
        import torch
        import triton

        lines.append(f"- torch {torch.__version__}, triton {triton.__version__}")
        device = "none (graded on the CPU, Triton under the interpreter)" if cpu or not torch.cuda.is_available() \
            else torch.cuda.get_device_name(0)
        lines.append(f"- GPU: {device}")
    except ImportError as error:
        lines.append(f"- torch or triton missing: {error}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--problems", default=FLASH_PROBLEMS, help='comma-separated problems ("": all)')
    parser.add_argument("--real", type=Path, help="a folder of real submission folders to add to the class")
    parser.add_argument("--only", default="", help="comma-separated members to grade (default: all)")
    parser.add_argument("--cpu", action="store_true", help="grade on the CPU instead of requiring a GPU")
    parser.add_argument("--batch", action="store_true", help="grade the class in one `autograder batch` run")
    parser.add_argument("--dry", action="store_true", help="build the class and write the summary without grading")
    args = parser.parse_args(argv)
    members = list(CLASS)
    if args.real is not None:
        if not args.real.is_dir():
            print(f"mixed_class: --real {args.real} is not a folder", file=sys.stderr)
            return 2
        members += [Member(f"real_{p.name}", "real", str(p.resolve())) for p in sorted(args.real.iterdir())
                    if (p / "adapters.py").is_file()]
    only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(only) - {m.name for m in members})
    if unknown:
        print(f"mixed_class: no member named {', '.join(unknown)}; the class is {', '.join(m.name for m in members)}",
              file=sys.stderr)
        return 2
    if only:
        members = [m for m in members if m.name in only]
    args.out.mkdir(parents=True, exist_ok=True)
    args.out.chmod(0o755)  # each executor's own user copies its submission from under here
    built = args.out / "submissions"
    built.mkdir(exist_ok=True)
    built.chmod(0o755)
    how = ("in one batch" if args.batch else "one submission at a time") + (" on the CPU" if args.cpu else " on one GPU")
    head = [f"# A mixed class, graded {how}", "",
            *stack(args.cpu or args.dry), f"- problems: {args.problems or 'all'}{'; DRY RUN: nothing graded' if args.dry else ''}",
            "", "| submission | kind | seconds | x correct | points | tests failed | charged most (CPU s) |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    rows: list[str] = []
    summary = args.out / "summary.md"
    correct_s: float | None = None
    over: list[str] = []
    slowest = 0.0
    started = time.monotonic()
    if args.batch:
        graded = batch(members, built, args.out, args.problems, args.cpu or args.dry, args.dry)
    for member in members:
        if args.batch:
            seconds, results, out = graded[member.name]
        else:
            out = args.out / member.name
            seconds, results = grade(grade_command(build(member, built), out, args.problems, args.cpu), out, args.dry)
        correct_s = seconds if member.name == CORRECT else correct_s
        slowest = max(slowest, seconds)
        ratio = f"{seconds / correct_s:.2f}" if correct_s else "-"
        if member.kind.startswith("one-bug") and correct_s and seconds > FACTOR * correct_s:
            over.append(f"{member.name} ({seconds:.1f} s)")
        tests = results.get("tests", [])
        failed = sum(test.get("status") == "failed" for test in tests)
        test, cpu_s = costliest(out / "timeline.jsonl")
        rows.append(f"| {member.name} | {member.kind} | {seconds:.1f} | {ratio} | {results.get('score', 0):.2f} "
                    f"| {failed} of {len(tests)} | {test} ({cpu_s:.1f}) |")
        print(rows[-1], flush=True)
        summary.write_text("\n".join(head + rows) + "\n")  # kept as it grows: a run cut short keeps its rows
    total = time.monotonic() - started
    verdict = (f"One-bug copies over {FACTOR} x the correct copy's {correct_s:.1f} s: {', '.join(over)}." if over
               else f"No one-bug copy took over {FACTOR} x the correct copy's grade." if correct_s
               else "The correct copy was not graded: no ratio.")
    tail = ["", f"{len(rows)} grades in {total:.0f} s ({3600 * len(rows) / max(total, 1e-9):.0f} an hour, {how}); "
            f"the slowest {slowest:.1f} s. " + verdict]
    summary.write_text("\n".join(head + rows + tail) + "\n")
    print("\n".join(tail))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
