"""The class's scores: one CSV for Gradescope's score upload, and histograms of each problem.

Read by staff after a batch grade. ``scores.csv`` has a row per student (a group submission
gives each member a row): ``Name``, ``SID``, ``Email`` (from the export's metadata), then each
problem's points, then ``Total Score`` (the results.json ``score``); then ``Submission`` (the
export's folder name) and ``Status`` (``graded``, or why not). Gradescope's "Upload scores"
matches rows by Email or SID and reads the column you pick (``Total Score``); the other columns
are ignored. ``Ungraded Points`` are the points this batch's runner could not grade (GPU tests
graded on a CPU), which ``Total Score`` leaves out; autograder/batch/grading.py writes the CSV
with any only under ``--partial``. ``Status`` is ``graded``, ``no test ran: <why>`` (a corrupt
zip, no adapters.py: 0 points) or ``failed: <why>``. A submission whose grade failed has empty point cells, so an upload never records
a 0 the student did not earn.

Names, SIDs and emails come from the export, which students fill in: a cell that a spreadsheet
would run as a formula (one that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) is written with a leading ``'`` (``spreadsheet_safe``), in this CSV and any other the
batch writes.

``histogram.md`` / ``histogram.png``: per problem (and the total) the count of students per
tenth of its points, with mean, median and how many earned every point.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from autograder.manifest import Manifest

BINS = 10
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def problem_scores(results: dict) -> dict[str, float]:
    """Each problem's points in a results.json (from its ``extra_data``)."""
    problems = (results.get("extra_data") or {}).get("problems") or {}
    return {name: float(entry.get("score", 0.0)) for name, entry in problems.items()}


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    """Write the class CSV: one dict per student with Name, SID, Email, problems, Total Score, ..."""
    header = ["Name", "SID", "Email", *columns, "Total Score", "Ungraded Points", "Submission", "Status"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _cell(row.get(key)) for key in header})
    return path


def spreadsheet_safe(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs: a leading ``'`` when it starts like a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") or "0"
    return spreadsheet_safe(str(value))


def _bars(values: list[float], top: float) -> list[int]:
    counts = [0] * BINS
    for value in values:
        index = BINS - 1 if top <= 0 else min(BINS - 1, int(BINS * value / top + 1e-9))
        counts[index] += 1
    return counts


def write_histograms(out: Path, scores: dict[str, list[float]], tops: dict[str, float],
                     note: str = "") -> tuple[Path, Path | None]:
    """``histogram.md`` (a table and text bars) and ``histogram.png`` (one panel a problem) in ``out``;
    ``note``, when given, is a paragraph under the title."""
    lines = ["# Scores per problem", "", *([note, ""] if note else []),
             f"{len(scores.get('Total Score', []))} graded submissions; the bars count submissions per tenth of each "
             "problem's points.", "",
             "| problem | points | mean | median | full marks | submissions per tenth of the points (0 ... full) |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, values in scores.items():
        top = tops[name]
        if not values:
            continue
        full = sum(value >= top - 1e-6 for value in values)
        bars = " ".join(str(count) for count in _bars(values, top))
        lines.append(f"| {name} | {top:g} | {statistics.mean(values):.2f} | {statistics.median(values):.2f} | "
                     f"{full}/{len(values)} | {bars} |")
    markdown = out / "histogram.md"
    markdown.write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return markdown, None
    names = [name for name, values in scores.items() if values]
    columns = 4
    rows = max(1, -(-len(names) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.8 * rows), squeeze=False)
    for axis in axes.flat[len(names):]:
        axis.axis("off")
    for axis, name in zip(axes.flat, names):
        top = tops[name]
        axis.hist(scores[name], bins=BINS, range=(0, top if top > 0 else 1), color="#4c72b0", edgecolor="white")
        axis.set_title(f"{name} (of {top:g})", fontsize=9)
        axis.set_xlabel("points", fontsize=8)
        axis.set_ylabel("submissions", fontsize=8)
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no fractional ticks
    figure.tight_layout()
    png = out / "histogram.png"
    figure.savefig(png, dpi=110)
    plt.close(figure)
    return markdown, png


def class_report(out: Path, manifest: Manifest, graded: list[tuple], problems: list[str] | None,
                 write_scores: bool = True, note: str = "") -> tuple[Path | None, Path, Path | None]:
    """The CSV and histograms of a batch. ``graded``: (submission, results dict or None, status) per
    submission, in export order. Without ``write_scores`` no CSV is written (and a stale one is
    removed), and the CSV's path is None. A submission where no test ran gets 0 Ungraded Points
    (a GPU grades it no further) and stays out of the histograms; ``note`` heads histogram.md
    (what the totals leave out)."""
    seen = {name for _, results, _ in graded if results for name in problem_scores(results)}
    wanted = set(problems) if problems else seen
    columns = [p.name for p in manifest.problems if p.name in wanted and (p.name in seen or problems)]
    rows, scores = [], {name: [] for name in [*columns, "Total Score"]}
    tops = {p.name: p.points for p in manifest.problems}
    tops["Total Score"] = sum(tops[name] for name in columns)
    for submission, results, status in graded:
        points = problem_scores(results) if results else {}
        cells = {name: (points.get(name, 0.0) if results else None) for name in columns}
        total = float(results["score"]) if results else None
        no_test = status.startswith("no test ran")  # 0 points whatever runner grades it: nothing is left to grade
        ungraded = (0.0 if no_test else float((results.get("extra_data") or {}).get("gpu_later_points") or 0.0)
                    ) if results else None
        if results and not no_test:  # the histograms count graded work; no-test rows are listed apart
            for name in columns:
                scores[name].append(cells[name])
            scores["Total Score"].append(total)
        students = submission.students or (None,)
        for student in students:
            rows.append({"Name": student.name if student else "", "SID": student.sid if student else "",
                         "Email": student.email if student else "", **cells, "Total Score": total,
                         "Ungraded Points": ungraded,
                         "Submission": submission.id, "Status": status})
    csv_path = write_csv(out / "scores.csv", rows, columns) if write_scores else None
    if not write_scores:
        (out / "scores.csv").unlink(missing_ok=True)  # a stale CSV must not be uploaded as this batch's
    markdown, png = write_histograms(out, scores, tops, note)
    return csv_path, markdown, png
