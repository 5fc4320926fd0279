"""Benchmark a submission's Triton FlashAttention-2 against PyTorch's attention backends.

Staff tool (needs a CUDA GPU). Prints one table and writes it as CSV, Markdown and PNG:

* leaderboard rows: batch 16 (1 x 16 heads folded), sequence 16384, d 64, bfloat16, causal.
  The submission is called as the leaderboard does, ``torch.compile(Fn.apply)``; it is compared
  with SDPA's flash, cuDNN and memory-efficient backends and with a ``torch.compile``'d naive
  attention. Forward, backward, and forward+backward (``o = f(q, k, v); o.sum().backward()``).
* sweep rows (CS336's flash_benchmarking grid): batch 1, causal, sequence 128 ... 65536,
  d 16 ... 128, bfloat16 and float32; the submission against compiled naive attention (and
  cuDNN where it runs: bfloat16). Cells that would not fit in memory, or exceed the time
  budget, are marked instead of timed.

Units: times are ``triton.testing.do_bench`` medians in ms. FLOP counts (causal, so half of
the full 4 B N^2 d): forward ``2 B N^2 d``, backward 2.5 times that (five products instead of
two), forward+backward ``7 B N^2 d``. "% matmul" divides the achieved rate by an 8192-cube
bfloat16 matmul timed in the same run; "x cuDNN" divides a time by cuDNN's at the same cell.

    python benchmarks/flash_attention_benchmark.py --out records/DATE-h200-benchmark --quick
    python benchmarks/flash_attention_benchmark.py --out DIR --full   # the official 10 s do_bench at the leaderboard shape
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch._functorch.config
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness import gpus  # noqa: E402
from harness.submission import load_adapters  # noqa: E402

LEADERBOARD = dict(batch=16, seq=16384, d=64, dtype=torch.bfloat16)
SDPA_BACKENDS = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
}


@dataclass
class Row:
    section: str  # "leaderboard" or "sweep"
    impl: str
    dtype: str
    batch: int
    seq: int
    d: int
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    fwd_bwd_ms: float | None = None
    note: str = ""
    fwd_tflops: float | None = None
    fwd_bwd_tflops: float | None = None
    pct_matmul: float | None = None
    x_cudnn: float | None = None


def naive_attention(Q, K, V, is_causal: bool):
    """softmax(Q K^T / sqrt(d) + causal mask) V, materialising the scores; compiled below."""
    S = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])  # (..., Nq, Nk)
    if is_causal:
        n_q, n_k = S.shape[-2:]
        above = torch.arange(n_k, device=S.device)[None, :] > torch.arange(n_q, device=S.device)[:, None]
        S = S.masked_fill(above, float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def causal_fwd_flop(batch: int, seq: int, d: int) -> float:
    return 2.0 * batch * seq * seq * d


def matmul_tflops(rep_ms: int) -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=rep_ms, return_mode="median")
    return 2 * 8192**3 / ms / 1e9


def time_impl(fn, shape4d: bool, batch, seq, d, dtype, warmup_ms, rep_ms) -> tuple[float, float, float]:
    """(fwd, bwd, fwd+bwd) medians in ms of ``fn(q, k, v, True)``; q, k, v random with requires_grad."""
    shape = (1, batch, seq, d) if shape4d else (batch, seq, d)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen).requires_grad_() for _ in range(3))
    dO = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
    bench = lambda f: triton.testing.do_bench(f, warmup=warmup_ms, rep=rep_ms, grad_to_none=[q, k, v], return_mode="median")  # noqa: E731
    fwd = bench(lambda: fn(q, k, v, True))
    o = fn(q, k, v, True)
    bwd = bench(lambda: o.backward(dO, retain_graph=True))
    del o

    def fwd_bwd():  # the leaderboard's official timing
        fn(q, k, v, True).sum().backward()

    both = bench(fwd_bwd)
    return fwd, bwd, both


def sdpa_fn(backend):
    def run(q, k, v, is_causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    return run


def fits(seq: int, dtype: torch.dtype, copies: int) -> bool:
    """Whether ``copies`` (seq, seq) matrices of dtype fit in 80% of the free GPU memory."""
    free, _ = torch.cuda.mem_get_info()
    return copies * seq * seq * torch.tensor([], dtype=dtype).element_size() < 0.8 * free


def run_cell(rows, section, impl, fn, shape4d, batch, seq, d, dtype, warmup_ms, rep_ms, deadline):
    row = Row(section, impl, str(dtype).replace("torch.", ""), batch, seq, d)
    rows.append(row)
    if time.time() > deadline:
        row.note = "skipped: time budget"
        return
    try:
        row.fwd_ms, row.bwd_ms, row.fwd_bwd_ms = time_impl(fn, shape4d, batch, seq, d, dtype, warmup_ms, rep_ms)
    except torch.cuda.OutOfMemoryError:
        row.note = "OOM"
    except Exception as error:  # noqa: BLE001  e.g. a backend that does not support this dtype or d
        row.note = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:80]}"
        traceback.print_exc()  # to stderr: the table keeps one line, the log keeps the cause
    finally:
        torch.cuda.empty_cache()


def fill_derived(rows: list[Row], matmul: float) -> None:
    cudnn = {(r.section, r.dtype, r.seq, r.d): r.fwd_bwd_ms for r in rows if r.impl == "sdpa_cudnn" and r.fwd_bwd_ms}
    for r in rows:
        if r.fwd_ms:
            r.fwd_tflops = causal_fwd_flop(r.batch, r.seq, r.d) / r.fwd_ms / 1e9
        if r.fwd_bwd_ms:
            r.fwd_bwd_tflops = 3.5 * causal_fwd_flop(r.batch, r.seq, r.d) / r.fwd_bwd_ms / 1e9
            r.pct_matmul = 100 * r.fwd_bwd_tflops / matmul
            ref = cudnn.get((r.section, r.dtype, r.seq, r.d))
            r.x_cudnn = r.fwd_bwd_ms / ref if ref else None


def fmt(x, digits=3):
    return "" if x is None else f"{x:.{digits}f}"


def table(rows: list[Row]) -> list[str]:
    head = ["section", "impl", "dtype", "batch", "seq", "d", "fwd ms", "bwd ms", "fwd+bwd ms",
            "fwd TFLOP/s", "fwd+bwd TFLOP/s", "% matmul", "x cuDNN", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r.section, r.impl, r.dtype, str(r.batch), str(r.seq), str(r.d), fmt(r.fwd_ms), fmt(r.bwd_ms),
                 fmt(r.fwd_bwd_ms), fmt(r.fwd_tflops, 0), fmt(r.fwd_bwd_tflops, 0), fmt(r.pct_matmul, 0), fmt(r.x_cudnn, 2), r.note]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(rows: list[Row], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    lb = [r for r in rows if r.section == "leaderboard" and r.fwd_bwd_ms]
    names = [r.impl for r in lb]
    x = range(len(lb))
    ax1.bar([i - 0.2 for i in x], [r.fwd_ms for r in lb], width=0.4, label="forward")
    ax1.bar([i + 0.2 for i in x], [r.fwd_bwd_ms for r in lb], width=0.4, label="forward+backward")
    ax1.set_xticks(list(x), names, rotation=20, ha="right")
    ax1.set_ylabel("ms (do_bench median)")
    ax1.set_title("leaderboard shape: (16, 16384, 64) bf16 causal")
    ax1.legend()
    for (impl, dtype), style in {("submission", "bfloat16"): "o-", ("naive_compiled", "bfloat16"): "s--",
                                 ("sdpa_cudnn", "bfloat16"): "^-", ("submission", "float32"): "o:",
                                 ("naive_compiled", "float32"): "s:"}.items():
        pts = sorted((r.seq, r.fwd_bwd_ms) for r in rows
                     if r.section == "sweep" and r.impl == impl and r.dtype == dtype and r.d == 64 and r.fwd_bwd_ms)
        if pts:
            ax2.plot(*zip(*pts), style, label=f"{impl} {dtype}")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("sequence length (batch 1, d 64, causal)")
    ax2.set_ylabel("forward+backward ms")
    ax2.set_title("sweep")
    ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the CSV, Markdown and PNG")
    parser.add_argument("--submission", type=Path, default=ROOT / "reference", help="default: reference/")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sweep, 1 s do_bench at the leaderboard shape (default)")
    size.add_argument("--full", action="store_true", help="whole sweep, the official 10 s do_bench at the leaderboard shape")
    parser.add_argument("--lb-rep-ms", type=int, default=None, help="do_bench rep (ms) at the leaderboard shape")
    parser.add_argument("--budget-s", type=float, default=None, help="stop timing new cells after this many seconds")
    args = parser.parse_args(argv)
    if not gpus.count():
        print("flash_attention_benchmark needs a CUDA GPU")
        return 2

    start = time.time()
    deadline = start + (args.budget_s if args.budget_s else (1500 if args.full else 240))
    lb_warmup, lb_rep = (1000, 10000) if args.full else (200, 1000)
    if args.lb_rep_ms:
        lb_warmup, lb_rep = max(args.lb_rep_ms // 10, 25), args.lb_rep_ms
    sw_warmup, sw_rep = (25, 200) if args.full else (10, 50)
    seqs = [2**i for i in range(7, 17)] if args.full else [1024, 4096, 16384]
    dims = [16, 32, 64, 128] if args.full else [64, 128]

    # The backward-only timing calls backward(retain_graph=True) on compiled graphs, which donated
    # buffers forbid; turning donation off costs nothing measurable here.
    torch._functorch.config.donated_buffer = False
    adapters = load_adapters(args.submission)
    submission = torch.compile(adapters.get_flashattention_autograd_function_triton().apply)
    naive = torch.compile(naive_attention)
    matmul = matmul_tflops(1000)

    rows: list[Row] = []
    b, n, d, dtype = LEADERBOARD["batch"], LEADERBOARD["seq"], LEADERBOARD["d"], LEADERBOARD["dtype"]
    run_cell(rows, "leaderboard", "submission", submission, False, b, n, d, dtype, lb_warmup, lb_rep, deadline)
    for name, backend in SDPA_BACKENDS.items():
        run_cell(rows, "leaderboard", name, sdpa_fn(backend), True, b, n, d, dtype, lb_warmup, lb_rep, deadline)
    run_cell(rows, "leaderboard", "naive_compiled", naive, False, b, n, d, dtype, lb_warmup // 10, lb_rep // 10, deadline)

    for dtype in (torch.bfloat16, torch.float32):
        for d in dims:
            for n in seqs:
                run_cell(rows, "sweep", "submission", submission, False, 1, n, d, dtype, sw_warmup, sw_rep, deadline)
                if fits(n, dtype, copies=6):  # scores, probabilities and their gradients
                    run_cell(rows, "sweep", "naive_compiled", naive, False, 1, n, d, dtype, sw_warmup, sw_rep, deadline)
                else:
                    rows.append(Row("sweep", "naive_compiled", str(dtype)[6:], 1, n, d, note="OOM (not run)"))
                if dtype == torch.bfloat16:
                    run_cell(rows, "sweep", "sdpa_cudnn", sdpa_fn(SDPBackend.CUDNN_ATTENTION), True, 1, n, d, dtype,
                             sw_warmup, sw_rep, deadline)

    fill_derived(rows, matmul)
    props = torch.cuda.get_device_properties(0)
    header = (
        f"{datetime.date.today().isoformat()}, {gpus.names()[0]} ({props.multi_processor_count} SMs), "
        f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}; "
        f"bf16 8192^3 matmul {matmul:.0f} TFLOP/s; submission {args.submission.name}; "
        f"leaderboard do_bench warmup={lb_warmup} rep={lb_rep} ms, sweep warmup={sw_warmup} rep={sw_rep} ms; "
        f"{'full' if args.full else 'quick'} run, {time.time() - start:.0f} s. "
        "FLOP: causal fwd 2*B*N^2*d, bwd 2.5x fwd, fwd+bwd 7*B*N^2*d."
    )
    lines = table(rows)
    print(header)
    print("\n".join(lines))

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "flash_attention_benchmark.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0]).keys()))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    (args.out / "flash_attention_benchmark.md").write_text(
        "# FlashAttention-2 benchmark\n\n" + header + "\n\n" + "\n".join(lines) + "\n"
    )
    plot(rows, args.out / "flash_attention_benchmark.png", header[:160])
    return 0


if __name__ == "__main__":
    sys.exit(main())
