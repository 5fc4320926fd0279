"""Time edited copies of the reference FlashAttention-2 file against each other, side by side.

Staff tool (needs CUDA). A kernel edit that gains 1% cannot be judged from two separate runs:
the same code moves by about that much between runs. This script loads every given copy of
``reference/cs336_systems/flash_attention_triton.py`` into one process, checks each against the
first, and times them at the leaderboard shape (16, 16384, 64) bfloat16 causal the way the
leaderboard does (``torch.compile(Fn.apply)``, ``o.sum().backward()``), in interleaved rounds,
with SDPA's flash and cuDNN backends in every round (``--sdpa`` picks them). It prints one
Markdown table: the median over rounds of each round's do_bench median, forward alone and
forward+backward, and their ratios to the first source and to the SDPA backends.

    python benchmarks/compare_kernel_sources.py base=reference/cs336_systems/flash_attention_triton.py \\
        lazy=/tmp/lazy.py [--rounds 5] [--rep-ms 400] [--profile] [--fwd-only lazy] [--out FILE.md]

``--fwd-only NAME,...`` times only the forward of those sources (copies that change only the
forward: half the GPU time).

``--profile`` adds a table of the CUDA kernels of one forward+backward call per source
(``torch.profiler``, mean over 5 calls): which kernels ran, and for how long.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
from flash_attention_benchmark import SDPA_BACKENDS, sdpa_fn  # beside this file
from ptxas_report import load_kernel_file  # beside this file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness import gpus  # noqa: E402
from harness.submission import load_adapters  # noqa: E402

load_adapters(ROOT / "reference")  # the copies import cs336_systems.flash_attention_inputs from here
LEADERBOARD = dict(batch=16, n=16384, d=64)


def load_source(name: str, path: Path):
    """The module at ``path`` (a copy of the reference kernel file), imported under a name of its own."""
    if not path.is_file():
        raise SystemExit(f"{name}={path}: no such file; pass NAME=PATH to a copy of flash_attention_triton.py")
    return load_kernel_file(path, f"kernel_source_{name}")


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in float64."""
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def leaderboard_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (LEADERBOARD["batch"], LEADERBOARD["n"], LEADERBOARD["d"])
    return tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(True)
                 for _ in range(3))


def run_once(fn, q, k, v) -> list[torch.Tensor]:
    """O, dQ, dK, dV of one leaderboard call."""
    for t in (q, k, v):
        t.grad = None
    o = fn(q, k, v, True)
    o.sum().backward()
    return [o.detach(), q.grad, k.grad, v.grad]


def profile_kernels(fn, q, k, v, calls: int = 5) -> list[tuple[str, float, float]]:
    """(kernel name, mean ms per call, launches per call) of the CUDA kernels that one forward+backward
    call launches, longest first."""
    from torch.profiler import ProfilerActivity, profile

    run_once(fn, q, k, v)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run_once(fn, q, k, v)
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / 1000 / calls, e.count / calls) for e in prof.key_averages()
            if e.device_time_total > 0]
    return sorted(rows, key=lambda row: -row[1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="NAME=PATH, the first is the baseline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=400, help="do_bench rep per source per round")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no new timing round after this many seconds since start (at least one round runs)")
    parser.add_argument("--fwd-only", default="", help="comma-separated source names: time their forward only")
    parser.add_argument("--sdpa", default="flash,cudnn", help="SDPA backends timed beside the sources: flash, cudnn, both, or none")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    return parser.parse_args(argv)


def table_writer(out: Path | None):
    """``emit(line)``: print a line and append it to ``out`` as it goes: a run cut short still leaves its tables."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("")

    def emit(line: str) -> None:
        print(line, flush=True)
        if out:
            with out.open("a") as file:
                file.write(line + "\n")
    return emit


def check_against_first(sources: dict, q, k, v, emit) -> None:
    """Each source's outputs' error against the first's; a source that fails is reported and removed."""
    emit("| source | max rel. error vs first (O, dQ, dK, dV) |")
    emit("| --- | --- |")
    baseline = None
    for name, fn in list(sources.items()):
        try:
            out = run_once(fn, q, k, v)
        except Exception as error:  # noqa: BLE001  one broken copy must not stop the others
            emit(f"| {name} | failed: {type(error).__name__}: {str(error)[:120]} |")
            del sources[name]
            continue
        baseline = baseline or out
        emit(f"| {name} | {max(rel(a, b) for a, b in zip(out, baseline)):.1e} |")
    if not sources:
        raise SystemExit("every source failed")


def sdpa_baselines(spec: str) -> dict:
    """{table name: call(q, k, v, is_causal)} of the SDPA backends that ``--sdpa`` names."""
    baselines = {}
    for backend in [b for b in spec.split(",") if b and b != "none"]:
        if f"sdpa_{backend}" not in SDPA_BACKENDS:
            raise SystemExit(f"--sdpa {backend!r}: expected flash, cudnn or mem_efficient")
        run = sdpa_fn(SDPA_BACKENDS[f"sdpa_{backend}"])  # as the benchmark table runs it: 16 heads of batch 1

        def sdpa(q, k, v, is_causal, run=run):
            return run(*(t.view(1, *t.shape) for t in (q, k, v)), is_causal)

        baselines[f"SDPA {'cuDNN' if backend == 'cudnn' else backend}"] = sdpa
    return baselines


def time_rounds(timed: dict, fwd_only: set[str], q, k, v, args, started: float, emit) -> dict[str, dict[str, list[float]]]:
    """Each round's do_bench median of each call, forward and forward+backward, until --rounds or --budget-s."""
    times: dict[str, dict[str, list[float]]] = {name: {"fwd": [], "fwd+bwd": []} for name in timed}
    for done_rounds in range(args.rounds):
        if done_rounds and args.budget_s is not None and time.monotonic() - started > args.budget_s:
            emit(f"(time budget {args.budget_s:.0f} s reached: {done_rounds} of {args.rounds} rounds run)")
            break
        for name, fn in timed.items():
            def fwd_bwd(fn=fn):
                fn(q, k, v, True).sum().backward()

            def fwd(fn=fn):
                with torch.no_grad():
                    fn(q, k, v, True)

            for label, call in (("fwd+bwd", fwd_bwd), ("fwd", fwd)):
                if label == "fwd+bwd" and name in fwd_only:
                    continue
                times[name][label].append(triton.testing.do_bench(
                    call, warmup=100, rep=args.rep_ms, grad_to_none=[q, k, v], return_mode="median"))
    return times


def emit_timing_table(times: dict[str, dict[str, list[float]]], first: str, fwd_only: set[str], emit) -> None:
    """The medians over rounds, and their ratios to the ``first`` source and to the SDPA backends."""
    med = {name: {label: statistics.median(ts) if ts else float("nan") for label, ts in per.items()}
           for name, per in times.items()}

    def ratio(name: str, label: str, to: str) -> str:
        value = med[name][label] / med[to][label] if to in med else float("nan")
        return "-" if value != value else f"{value:.4f}"

    emit("")
    emit("| source | fwd ms | fwd+bwd ms | fwd+bwd rounds (ms) | fwd+bwd x first | fwd+bwd x SDPA flash "
         "| fwd+bwd x cuDNN | fwd x first | fwd x cuDNN |")
    emit("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in times:
        rounds = ", ".join(f"{t:.3f}" for t in times[name]["fwd+bwd"]) or "(forward only: " + ", ".join(
            f"{t:.3f}" for t in times[name]["fwd"]) + ")"
        fwd_bwd = "-" if name in fwd_only else f"{med[name]['fwd+bwd']:.3f}"
        emit(f"| {name} | {med[name]['fwd']:.3f} | {fwd_bwd} | {rounds} | "
             f"{ratio(name, 'fwd+bwd', first)} | {ratio(name, 'fwd+bwd', 'SDPA flash')} | "
             f"{ratio(name, 'fwd+bwd', 'SDPA cuDNN')} | {ratio(name, 'fwd', first)} | {ratio(name, 'fwd', 'SDPA cuDNN')} |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    if not gpus.count():
        raise SystemExit("compare_kernel_sources needs a CUDA GPU")
    sources = {}
    for item in args.sources:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"{item!r}: expected NAME=PATH")
        sources[name] = torch.compile(load_source(name, Path(path)).FlashAttentionTriton.apply)
    emit = table_writer(args.out)
    q, k, v = leaderboard_inputs()
    emit(f"{gpus.names()[0]}, torch {torch.__version__}, triton {triton.__version__}; "
         f"shape {tuple(q.shape)} bfloat16 causal; {args.rounds} rounds, do_bench rep {args.rep_ms} ms")
    emit("")
    check_against_first(sources, q, k, v, emit)
    baselines = sdpa_baselines(args.sdpa)
    fwd_only = {name for name in args.fwd_only.split(",") if name}
    if fwd_only - set(sources):
        emit(f"(--fwd-only names not among the loaded sources, ignored: {sorted(fwd_only - set(sources))})")
    times = time_rounds({**sources, **baselines}, fwd_only, q, k, v, args, started, emit)
    emit_timing_table(times, next(iter(sources)), fwd_only, emit)
    if args.profile:
        for name, fn in sources.items():
            emit("")
            emit(f"| {name}: CUDA kernel | ms per fwd+bwd call |")
            emit("| --- | --- |")
            for kernel, ms, _ in profile_kernels(fn, q, k, v):
                emit(f"| {kernel[:90]} | {ms:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
