"""The leaderboard table: the ranking as Markdown and as a PNG bar chart.

Students and staff read what this file writes. Only accepted runs of the official timing are
ranked (``include_unofficial`` adds ``--quick`` and ``--cpu`` runs, marked as such); each
name appears once, with its fastest accepted run. Refused runs are listed below the ranking with
their reasons, so that a student can see why an attempt is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from leaderboard.config import LEADERBOARD, OFFICIAL, attention_flops

FLOPS = attention_flops(LEADERBOARD.batch, LEADERBOARD.n, LEADERBOARD.d, LEADERBOARD.is_causal)

CONDITIONS = (
    "FlashAttention-2 forward + backward: batch 1 x 16 heads, sequence 16384, head dim 64, causal, "
    f"bfloat16. Official timing: `flash = torch.compile(Fn.apply)`, `flash(q, k, v, True).sum().backward()`, "
    f"`triton.testing.do_bench(rep={OFFICIAL.rep_ms}, warmup={OFFICIAL.warmup_ms})`, median of the per-call times. "
    f"TFLOP/s counts {FLOPS / 1e12:.3f} TFLOP per call: causal forward 2·B·N²·d (half of 4·B·N²·d) plus a "
    "backward of 2.5 times that, B = 16, N = 16384, d = 64. \"% of matmul\" compares with an 8192³ bf16 "
    "`torch.matmul` timed in the same run. Listed runs passed the correctness gate and every cheat check."
)


def ranking(records: list[dict], include_unofficial: bool = False) -> list[dict]:
    """The fastest accepted run of each name, fastest first; each gets ``runs`` (its run count)."""
    runs: dict[str, int] = {}
    best: dict[str, dict] = {}
    for record in records:
        if not record.get("accepted") or record.get("time_ms") is None:
            continue
        if record.get("mode") != "official" and not include_unofficial:
            continue
        name = record["name"]
        runs[name] = runs.get(name, 0) + 1
        if name not in best or record["time_ms"] < best[name]["time_ms"]:
            best[name] = record
    return [{**record, "runs": runs[name]} for name, record in sorted(best.items(), key=lambda item: item[1]["time_ms"])]


def _cell(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def conditions(rows: list[dict]) -> list[str]:
    """The paragraphs above the table: the official conditions, and, where ranked rows were timed
    otherwise (``--quick``, ``--cpu``), what they measured, so that no row reads as official."""
    other = [row for row in rows if row.get("mode") != "official"]
    if not other:
        return [CONDITIONS]
    shapes = "; ".join(sorted({f"`{row.get('mode', '?')}` runs: {row.get('problem', 'shape not recorded')}"
                               for row in other}))
    if len(other) == len(rows):
        return [f"**Not the official timing.** Every row below was timed under other conditions ({shapes}); "
                "its time, TFLOP/s and % of matmul say nothing about the official problem and rank nothing.",
                "", f"The official timing, for comparison: {CONDITIONS}"]
    return [CONDITIONS, "", f"**Rows whose mode is not `official` were timed under other conditions** ({shapes}); "
            "they cannot be compared with the official rows."]


def refusal_reason(refusal: dict) -> str:
    """A refusal in a table cell: its code, and for a plain ``error`` what the error was (a stub's
    ``not implemented: FILE: FUNCTION``, else the message's start), so a student sees why."""
    from harness.stub_failures import STUB_MESSAGE

    code, message = str(refusal.get("code", "?")), str(refusal.get("message", ""))
    if code != "error" or not message:
        return code
    stub = STUB_MESSAGE.search(message)
    if stub:
        return f"not implemented: {stub['file']}: {stub['function']}"
    first = " ".join(message.split())
    return f"error: {first[:100]}{'...' if len(first) > 100 else ''}".replace("|", "/")


def render_markdown(records: list[dict], include_unofficial: bool = False) -> str:
    """The ranking (and recent refusals) as a Markdown document."""
    rows = ranking(records, include_unofficial)
    lines = ["# FlashAttention-2 leaderboard", "", *conditions(rows), ""]
    if not rows:
        lines.append("No accepted runs yet.")
    else:
        mode_header = " mode |" if include_unofficial else ""
        lines += [
            f"| # | name | time (ms) | TFLOP/s | % of matmul | random dO (ms) | IQR % |{mode_header} GPU | torch / triton | date | submission | runs |",
            "|---:|---|---:|---:|---:|---:|---:|" + ("---|" if include_unofficial else "") + "---|---|---|---|---:|",
        ]
        for rank, r in enumerate(rows, start=1):
            env = r.get("environment", {})
            mode_cell = f" {r.get('mode')} |" if include_unofficial else ""
            lines.append(
                f"| {rank} | {r['name']} | {_cell(r.get('time_ms'), '.3f')} | {_cell(r.get('tflops'), '.1f')} | "
                f"{_cell(r.get('pct_of_matmul'), '.1f')} | {_cell(r.get('random_dO_ms'), '.3f')} | {_cell(r.get('iqr_pct'), '.1f')} |"
                f"{mode_cell} {env.get('gpu', '?')} | {env.get('torch', '?')} / {env.get('triton', '?')} | "
                f"{r.get('date', '?')[:10]} | `{r.get('submission_hash', '?')[:12]}` | {r['runs']} |"
            )
    refused = [r for r in records if not r.get("accepted")][-20:]
    if refused:
        lines += ["", "## Refused runs (latest 20)", "", "| name | date | mode | reasons |", "|---|---|---|---|"]
        for r in refused:
            reasons = "; ".join(refusal_reason(x) for x in r.get("refusals", []))
            lines.append(f"| {r['name']} | {r.get('date', '?')[:19]} | {r.get('mode', '?')} | {reasons} |")
    return "\n".join(lines) + "\n"


def render_png(records: list[dict], path: Path, include_unofficial: bool = False) -> Path:
    """A horizontal bar chart of the ranking's times, with the physical floor marked."""
    import matplotlib.pyplot as plt

    fig = chart(records, include_unofficial)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def chart(records: list[dict], include_unofficial: bool = False):
    """The bar chart as a matplotlib Figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ranking(records, include_unofficial)
    height = 1.2 + 0.45 * max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(9, height))
    if rows:
        names = [r["name"] for r in rows][::-1]
        times = [r["time_ms"] for r in rows][::-1]
        bars = ax.barh(names, times, color="#4878a8")
        for bar, r in zip(bars, rows[::-1]):
            label = f" {r['time_ms']:.3f} ms" + (f", {r['tflops']:.0f} TFLOP/s" if r.get("tflops") else "")
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8)
        floors = [r["floor_ms"] for r in rows if r.get("floor_ms")]
        if floors:
            floor = min(floors)
            ax.axvline(floor, color="#b04040", linestyle="--", linewidth=1)
            # in a strip kept free above the top bar, inside the axes: clear of the bars and of the title
            ax.text(floor, len(rows) - 0.45, f" physical floor {floor:.2f} ms", color="#b04040", fontsize=8,
                    va="bottom")
            ax.set_ylim(-0.5, len(rows) + 0.1)
        ax.set_xlim(0, max(times) * 1.35)
    else:
        ax.text(0.5, 0.5, "no accepted runs yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("forward + backward time (ms, median; lower is better)")
    problems = {r.get("problem") for r in rows} - {None}
    problem = problems.pop() if len(problems) == 1 else LEADERBOARD.describe()
    ax.set_title(f"FlashAttention-2 leaderboard: {problem}", fontsize=10)
    fig.tight_layout()
    return fig


def write_table(records: list[dict], out_dir: Path, include_unofficial: bool = False) -> tuple[Path, Path | None]:
    """Write ``leaderboard.md`` and ``leaderboard.png`` into ``out_dir``; return both paths.

    Without matplotlib the PNG is skipped with a warning (its path is then None): a missing
    plotting library must not lose a run's results.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = out_dir / "leaderboard.md"
    markdown.write_text(render_markdown(records, include_unofficial), encoding="utf-8")
    try:
        return markdown, render_png(records, out_dir / "leaderboard.png", include_unofficial)
    except ImportError as error:
        print(f"warning: no PNG chart ({error}); install matplotlib to get one", file=sys.stderr)
        return markdown, None
