"""Measure, on two GPUs over NCCL, what the part-2 GPU tests judge: DDP overlap in the profile, FSDP memory.

Run from the repo root on a machine with two CUDA GPUs: ``python3 gpu_checks/parallel_profile.py
OUT.md`` (``OUT.md 1`` runs one rank on one GPU: no NCCL kernel is launched then, but the
trace's parsing and the memory figures can be checked). For the reference and the two mutants those tests must catch
(``ddp_all_reduce_at_the_end``, ``fsdp_keeps_full_weights_after_forward``), it runs the same
probes as ``tests/test_ddp_overlap_individual.py::test_ddp_overlap_shows_in_the_gpu_profile``
and ``tests/test_fsdp.py::test_fsdp_memory_on_two_gpus`` (in this process, no executor) and
writes a Markdown table per probe with rank 0's numbers:

- DDP: the backward's span on the GPU (first to last backward kernel), how many NCCL kernels
  started inside it, and how much NCCL kernel time lay inside it;
- FSDP: memory held after wrapping, and the peaks above a step's start during the forward and
  the whole step, against the limits ``harness/fsdp_checks.py`` sets.
"""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from fixtures import materialize  # noqa: E402
from fixtures.mutants import get  # noqa: E402
from harness import ddp_checks, fsdp_checks, parallel_runs  # noqa: E402
from executor.probes import find  # noqa: E402

MIB = 2**20


def overlap_row(name: str, kernels: list) -> str:
    figures = ddp_checks.overlap_figures(kernels)
    if figures["backward_us"] is None:
        return f"| {name} | no backward kernel recorded | {figures['nccl']} | | | |"
    first_nccl = "none" if figures["first_nccl_us"] is None else f"{figures['first_nccl_us']:.0f}"
    return (f"| {name} | {figures['backward_us']:.0f} | {figures['nccl']} | {figures['started_inside']} | "
            f"{figures['nccl_us_inside']:.0f} | {first_nccl} |")


def main(out: Path, world_size: int = 2) -> int:
    root = Path(tempfile.mkdtemp(prefix="parallel-profile-"))
    submissions = {"reference": KIT / "reference",
                   "ddp_all_reduce_at_the_end": materialize(get("ddp_all_reduce_at_the_end"), root / "ddp_all_reduce_at_the_end"),
                   "fsdp_keeps_full_weights_after_forward":
                       materialize(get("fsdp_keeps_full_weights_after_forward"), root / "fsdp_keeps_full_weights_after_forward")}
    settings = ddp_checks.PROFILE_SETTINGS
    lines = [f"## DDP overlap in the GPU profile ({settings['layers']} x Linear({settings['width']}, "
             f"{settings['width']}), {settings['rows']} rows a rank, {world_size} rank(s), rank 0)", "",
             "| submission | backward span (us) | NCCL kernels | started before the backward ended | "
             "NCCL time inside the backward (us) | first NCCL start (us after the backward's first kernel) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name in ("reference", "ddp_all_reduce_at_the_end"):
        stand_in = types.SimpleNamespace(__file__=str(submissions[name] / "adapters.py"))
        result = find("ddp_profile.profile")(lambda stand_in=stand_in: stand_in, world_size, dict(settings))
        ranks = parallel_runs.ranks_of(result, name)
        lines.append(overlap_row(name, ranks[0]["value"]["kernels"]))
        print(lines[-1], flush=True)
    memory = fsdp_checks.MEMORY_SETTINGS
    limits = fsdp_checks.fsdp_memory_limits(world_size)
    layer, held_limit, forward_limit = limits["layer"], limits["held"] / MIB, limits["forward_peak"] / MIB
    lines += ["", f"## FSDP memory ({memory['layers']} x Linear({memory['width']}, {memory['width']}) float32, "
              f"{memory['layers'] * layer / MIB:.0f} MiB of weights, {world_size} rank(s), rank 0)", "",
              f"| submission | held after wrapping (MiB; limit {held_limit:.0f}) | forward peak (MiB; limit "
              f"{forward_limit:.0f}) | step peak (MiB) |", "| --- | --- | --- | --- |"]
    for name in ("reference", "fsdp_keeps_full_weights_after_forward"):
        stand_in = types.SimpleNamespace(__file__=str(submissions[name] / "adapters.py"))
        result = find("fsdp.memory")(lambda stand_in=stand_in: stand_in, world_size, dict(memory))
        value = parallel_runs.ranks_of(result, name)[0]["value"]
        lines.append(f"| {name} | {value['held'] / MIB:.1f} | {value['forward_peak'] / MIB:.1f} | "
                     f"{value['step_peak'] / MIB:.1f} |")
        print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2))
