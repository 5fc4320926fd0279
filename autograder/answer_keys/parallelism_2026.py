"""Answer key and checker for the 2026 edition's parallelism calculations (handout W7 to W11).

Staff only. Each checkable number of W7 alternate_ring_all_reduce, W8 data_parallel_calcs, W9
fsdp_calcs, W10 tp_calcs and W11 fsdp_tp_calcs is an :class:`Item`: a key such as ``W8.d.pcie``,
the question, the answer computed below from the handout's facts, its unit, and the working a TA
can read out. The written parts (why, when, what it says) are for the TA; this checks the numbers.

A TA copies a writeup's numbers into a TOML (or JSON) file of ``"key" = value`` lines, leaving out
what the writeup does not give, and runs

    .venv/bin/python -m autograder.answer_keys.parallelism_2026 template > answers.toml
    .venv/bin/python -m autograder.answer_keys.parallelism_2026 check answers.toml
    .venv/bin/python -m autograder.answer_keys.parallelism_2026 key    # the key, with its working

``check`` marks each item right, wrong or missing and exits 0 when every item is right, 1 when
one is wrong or missing, 2 when the file cannot be read as answers (an unknown key, a value
that is not a number, a choice that is not one of the item's).

How an answer is judged: a whole count (steps, GPUs, sequences, all-reduces) must be exact; a
quantity (bytes, milliseconds) must be within ``REL_TOL`` of the key, which allows a writeup's
rounding to three figures and no more (the handout's GB are 1e9 bytes: a writeup that takes them
as 2^30 is 7% off and marked wrong); an unbounded answer (W7's S*
for N = 2) must be ``inf``; a choice must name the right option.
"""

from __future__ import annotations

from harness.interpreter import require_kit_stack

if __name__ == "__main__":  # before the kit's imports: the wrong Python gets one line, not a traceback
    require_kit_stack("python -m autograder.answer_keys.parallelism_2026")

import argparse
import dataclasses
import difflib
import json
import math
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

REL_TOL = 0.02
"""A quantity within 2% of the key is right (three-figure rounding; not GB taken as 2^30 bytes)."""

# -- the handout's facts (handout/README.md, the 2026 edition's written problems) --
XL_PARAMS = 1998.2e6
B27_PARAMS = 3406.8e6          # the 2.7B model
B8_PARAMS = 8.1e9              # §3.8's model, "about 8.1e9 parameters"
BF16, FP32 = 2, 4              # bytes an element
TRAINING_STATE = 16            # bytes a parameter: float32 weights, gradients and AdamW's two moments
NVLINK_DIRECTION = 450e9       # bytes/s a direction a GPU (W8)
PCIE_DIRECTION = 64e9          # bytes/s a direction, PCIe Gen5 (W8)
BF16_PEAK = 989e12             # FLOP/s, dense
UTILISATION = 0.5
H100_MEMORY, H200_MEMORY = 80e9, 141e9
RING_ALPHA, RING_BETA = 10e-6, 100e9   # W7: a step's fixed cost (s), a link's bandwidth (bytes/s)
D_MODEL_27, BLOCKS_27 = 2560, 32       # the 2.7B model's width and depth (W10, W11)

HANDOUT_FACTS = {
    "W7": ("alpha = 10 us", "beta = 100 GB/s", "N = 2, 8 and 64", "1 KB", "N = 8"),
    "W8": ("1998.2M parameters", "8 H100s", "bf16 gradients", "450 GB/s", "64 GB/s", "989 TFLOP/s", "50%",
           "1024 tokens"),
    "W9": ("3406.8M parameters", "16 bytes a parameter", "8.1e9 parameters", "N = 8", "bf16 gathers",
           "float32 reduce-scatters", "DDP's all-reduce in float32"),
    "W10": ("2.7B model", "32 blocks", "d_model 2560", "b = 4", "L = 1024", "T = 8", "bf16 gradients"),
    "W11": ("16 GPUs", "2 FSDP groups x 8 tensor-parallel ranks", "2.7B model", "b = 8", "L = 2048",
            "32 blocks", "d_model 2560", "bf16 gathers, float32 reduce-scatters"),
}
"""What each problem's text in the handout must say for this key to answer it (checked by the selftest)."""

PROBLEMS = {"W7": "alternate_ring_all_reduce", "W8": "data_parallel_calcs", "W9": "fsdp_calcs", "W10": "tp_calcs",
            "W11": "fsdp_tp_calcs"}
"""The written problems this key answers: section -> the manifest's name (edition 2026)."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One checkable answer: ``answer`` is an int (exact), a float (within ``REL_TOL``; ``inf`` only
    by ``inf``) or a str, one of ``choices``."""

    key: str
    question: str
    answer: int | float | str
    unit: str
    working: str
    choices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Mark:
    """The checker's verdict on one item: ``status`` is "right", "wrong" or "missing"."""

    key: str
    status: str
    given: object
    expected: object
    unit: str


def _ring_bytes(size: float, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``size`` bytes: 2 (N - 1) / N of it."""
    return 2 * (ranks - 1) / ranks * size


def _alternate_threshold(ranks: int) -> float:
    """W7's S*: the alternate ring ((N - 1) steps, (N - 1) S bytes) beats the standard one
    (2 (N - 1) steps, 2 (N - 1) S / N bytes) when S (1 - 2/N) / beta < alpha."""
    return math.inf if ranks <= 2 else RING_ALPHA * RING_BETA * ranks / (ranks - 2)


def _items() -> tuple[Item, ...]:
    items = []

    def add(key, question, answer, unit, working, choices=()):
        items.append(Item(key, question, answer, unit, working, tuple(choices)))

    # -- W7: the alternate ring all-reduce --
    add("W7.a.standard_steps", "standard ring, N = 8: steps", 2 * 7, "steps", "2 (N - 1)")
    add("W7.a.standard_bytes_per_S", "standard ring, N = 8: bytes sent a rank, in units of S", 2 * 7 / 8, "S",
        "2 (N - 1) S / N")
    add("W7.a.alternate_steps", "alternate ring, N = 8: steps", 7, "steps", "N - 1")
    add("W7.a.alternate_bytes_per_S", "alternate ring, N = 8: bytes sent a rank, in units of S", 7.0, "S",
        "(N - 1) S")
    for n in (2, 8, 64):
        add(f"W7.c.S_star_N{n}", f"S* for N = {n}", _alternate_threshold(n), "bytes",
            "alternate faster when S < alpha beta N / (N - 2); alpha beta = 10 us x 100 GB/s = 1 MB"
            + ("; N = 2: both send S, the alternate in one step instead of two, so it always wins (inf)"
               if n == 2 else ""))
    add("W7.c.choice_1KB", "which ring for a 1 KB tensor", "alternate" if 1e3 < _alternate_threshold(8) else "standard",
        "", "1 KB is far below S* (about 1 MB for any N): latency-bound", ("standard", "alternate"))
    xl_gradients = XL_PARAMS * BF16
    add("W7.c.choice_xl_gradients", "which ring for the xl model's bf16 gradients on 8 ranks",
        "alternate" if xl_gradients < _alternate_threshold(8) else "standard", "",
        f"{xl_gradients / 1e9:.2f} GB is far above S*(8) = 1.33 MB: bandwidth-bound", ("standard", "alternate"))

    # -- W8: data parallelism, and when its all-reduce hides under compute --
    sent = _ring_bytes(XL_PARAMS * BF16, 8)
    add("W8.a", "bytes each rank sends per step", sent, "bytes", "2 (8 - 1) / 8 x 1998.2e6 x 2 B")
    link_ms = {"nvlink": sent / NVLINK_DIRECTION * 1e3, "pcie": sent / PCIE_DIRECTION * 1e3}
    add("W8.b.nvlink", "all-reduce lower bound over NVLink", link_ms["nvlink"], "ms", "W8.a / 450 GB/s")
    add("W8.b.pcie", "all-reduce lower bound over PCIe Gen5", link_ms["pcie"], "ms", "W8.a / 64 GB/s")
    sequence_ms = 6 * XL_PARAMS * 1024 / (BF16_PEAK * UTILISATION) * 1e3
    add("W8.c", "compute time of one 1024-token sequence on one rank", sequence_ms, "ms",
        "6 x 1998.2e6 x 1024 FLOPs / (989e12 x 0.5)")
    for link in ("nvlink", "pcie"):
        add(f"W8.d.{link}", f"smallest whole b that hides the all-reduce ({link})",
            math.ceil(link_ms[link] / sequence_ms), "sequences",
            f"ceil(W8.b.{link} / W8.c) = ceil({link_ms[link]:.2f} / {sequence_ms:.2f})")

    # -- W9: fully sharded training state, and FSDP's traffic against DDP's --
    state = B27_PARAMS * TRAINING_STATE
    add("W9.a", "2.7B training state a rank at N = 8", state / 8, "bytes", "16 B x 3406.8e6 / N")
    for gpu, memory in (("h100", H100_MEMORY), ("h200", H200_MEMORY)):
        add(f"W9.b.{gpu}", f"smallest N: 2.7B state in half a {gpu.upper()}", math.ceil(state / (memory / 2)), "GPUs",
            f"ceil({state / 1e9:.1f} GB / {memory / 2e9:g} GB)")
    state_8b = B8_PARAMS * TRAINING_STATE
    for gpu, memory in (("h100", H100_MEMORY), ("h200", H200_MEMORY)):
        add(f"W9.c.{gpu}", f"smallest N: 8B state in half a {gpu.upper()}", math.ceil(state_8b / (memory / 2)),
            "GPUs", f"ceil({state_8b / 1e9:.1f} GB / {memory / 2e9:g} GB)")
    add("W9.d.fsdp", "FSDP bytes a rank sends per step at N = 8", 7 / 8 * (BF16 + BF16 + FP32) * B27_PARAMS, "bytes",
        "(N - 1) / N x P x (2 B gather forward + 2 B gather backward + 4 B reduce-scatter)")
    add("W9.d.ddp", "DDP (float32 all-reduce) bytes a rank sends per step at N = 8",
        _ring_bytes(B27_PARAMS * FP32, 8), "bytes", "2 (N - 1) / N x 4 B x P: the same as FSDP's")

    # -- W10: tensor parallelism of the 2.7B model --
    add("W10.a.forward", "all-reduces a block needs in the forward", 2, "all-reduces",
        "one after the attention's output projection, one after the SwiGLU's row-split matrix")
    add("W10.a.backward", "all-reduces a block needs in the backward", 2, "all-reduces",
        "one for the gradient of each of the two sub-layers' replicated inputs")
    activation = 4 * 1024 * D_MODEL_27 * BF16
    add("W10.b", "bytes of each all-reduce (b = 4, L = 1024, d_model 2560, bf16)", activation, "bytes", "b L d_model x 2 B")
    add("W10.c.tp", "tensor-parallel bytes a GPU sends per step", 4 * BLOCKS_27 * _ring_bytes(activation, 8), "bytes",
        "4 all-reduces x 32 blocks x 2 (8 - 1) / 8 x W10.b")
    add("W10.c.dp", "DDP bytes a rank sends per step, 2.7B on 8 GPUs, bf16 gradients",
        _ring_bytes(B27_PARAMS * BF16, 8), "bytes", "2 (8 - 1) / 8 x 3406.8e6 x 2 B")

    # -- W11: FSDP x TP on a 2D mesh of 2 x 8 --
    add("W11.a", "training state a GPU", state / 16, "bytes", "16 B x 3406.8e6 / (8 TP x 2 FSDP)")
    add("W11.b.tp", "TP all-reduce bytes a GPU sends per step", 4 * BLOCKS_27 * _ring_bytes(8 * 2048 * D_MODEL_27 * BF16, 8),
        "bytes", "4 x 32 blocks x 2 (8 - 1) / 8 x (8 x 2048 x 2560 x 2 B)")
    add("W11.b.fsdp", "FSDP bytes a GPU sends per step", (2 - 1) / 2 * (BF16 + BF16 + FP32) * B27_PARAMS / 8, "bytes",
        "(2 - 1) / 2 x (P / 8) x (2 + 2 + 4 B)")
    add("W11.c", "which traffic crosses nodes", "fsdp", "", "the FSDP groups span the two nodes; TP stays in a node's "
        "NVLink, where its 11x larger, blocking all-reduces belong", ("tp", "fsdp", "both"))
    return tuple(items)


KEY = _items()
"""Every checkable item of W7 to W11, in the handout's order."""
_BY_KEY = {item.key: item for item in KEY}


def _number(item: Item, value: object) -> float:
    """``value`` as a number for ``item``; ValueError naming the item otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{item.key}: expected a number of {item.unit}; got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace("_", "").replace(",", ""))
        except ValueError:
            pass
    raise ValueError(f"{item.key}: expected a number of {item.unit} (for example 1.5e9, or inf); got {value!r}")


def _is_right(item: Item, value: object) -> bool:
    if item.choices:
        if not isinstance(value, str) or value.strip().lower() not in item.choices:
            raise ValueError(f"{item.key}: expected one of {list(item.choices)}; got {value!r}")
        return value.strip().lower() == item.answer
    number = _number(item, value)
    if isinstance(item.answer, int):
        return number == item.answer
    if math.isinf(item.answer) or math.isinf(number) or math.isnan(number):
        return number == item.answer
    return math.isclose(number, item.answer, rel_tol=REL_TOL)


def check(answers: Mapping[str, object]) -> list[Mark]:
    """One :class:`Mark` for each item of ``KEY``, in order; an item ``answers`` lacks is "missing".

    Raises ValueError, naming the key, for a key that is not an item's and for a value that is
    not the item's kind (a number, or one of its choices)."""
    unknown = sorted(set(answers) - set(_BY_KEY))
    if unknown:
        hints = {key: difflib.get_close_matches(key, _BY_KEY, n=1) for key in unknown}
        raise ValueError("no such items: " + ", ".join(f"{k}" + (f" (did you mean {h[0]}?)" if h else "")
                                                        for k, h in hints.items())
                         + "; `template` lists every item")
    marks = []
    for item in KEY:
        if item.key not in answers:
            marks.append(Mark(item.key, "missing", None, item.answer, item.unit))
            continue
        right = _is_right(item, answers[item.key])
        marks.append(Mark(item.key, "right" if right else "wrong", answers[item.key], item.answer, item.unit))
    return marks


def read_answers(path: Path) -> dict[str, object]:
    """A TOML (or ``.json``) file of ``"key" = value``; ValueError saying what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {error} (keys with "
                         'dots need quotes in TOML: "W8.a" = 6.99e9)') from error
    if not isinstance(data, dict) or any(isinstance(value, (dict, list)) for value in data.values()):
        raise ValueError(f"{path}: expected flat \"key\" = value lines (quote keys with dots in TOML)")
    return data


def _shown(value: object) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def report(marks: list[Mark]) -> str:
    """The checker's table: one line an item, then how many are right of each problem."""
    lines = [f"{'item':<28} {'mark':<8} {'given':>12} {'key':>12}  unit"]
    for mark in marks:
        given = "" if mark.status == "missing" else _shown(mark.given)
        lines.append(f"{mark.key:<28} {mark.status:<8} {given:>12} {_shown(mark.expected):>12}  {mark.unit}")
    for section, name in PROBLEMS.items():
        mine = [m for m in marks if m.key.split(".")[0] == section]
        lines.append(f"{section} {name}: {sum(m.status == 'right' for m in mine)} of {len(mine)} right")
    return "\n".join(lines)


def template() -> str:
    """A TOML answers file with every item commented out, its question and unit beside it."""
    lines = ["# Uncomment each item the writeup gives and put its number (or choice) after '='."]
    for item in KEY:
        kind = f" (one of {', '.join(item.choices)})" if item.choices else f" [{item.unit}]"
        lines.append(f'# "{item.key}" =    # {item.question}{kind}')
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``template``, ``key`` or ``check FILE``; exit 0 all right, 1 some wrong or missing, 2 bad input."""
    parser = argparse.ArgumentParser(prog="python -m autograder.answer_keys.parallelism_2026",
                                     description="Check a writeup's numbers for W7-W11 (edition 2026).")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("template", help="print an answers file to fill in")
    sub.add_parser("key", help="print the key with its working")
    one = sub.add_parser("check", help="check an answers file (TOML, or .json)")
    one.add_argument("answers", type=Path)
    args = parser.parse_args(argv)
    if args.command == "template":
        print(template(), end="")
        return 0
    if args.command == "key":
        for item in KEY:
            print(f"{item.key:<28} {_shown(item.answer):>12} {item.unit:<10} {item.working}")
        return 0
    try:
        marks = check(read_answers(args.answers))
    except ValueError as error:
        print(f"parallelism_2026: {error}", file=sys.stderr)
        return 2
    print(report(marks))
    return 0 if all(mark.status == "right" for mark in marks) else 1


if __name__ == "__main__":
    sys.exit(main())
