"""Can any data-parallel training be bitwise equal to one process on CS336 2026's FSDP test? Measure it.

Staff only. CS336 2026's ``test_fsdp_correctness[fp32]`` compares FSDP on 2 ranks with one
process on the whole batch using ``torch.equal``. This script takes that test's toy model (from
a checkout of stanford-cs336/assignment2-systems whose ``tests/adapters.py`` is the router in
cs336_distributed.md) and trains it the same way (seeds, batch of 20 sequences of 8 tokens,
SGD at 0.01, 3 steps, the same reshuffles) twice, with no communication library at all:

- one process on the whole batch;
- exact data parallelism: two copies, each on its half of the batch, each gradient replaced by
  the mean of the two copies' gradients (``(g0 + g1) / 2``) before every step.

It prints, per step, the parameters that differ and by how much. Any difference is a floor no
FSDP or DDP can go under: they all compute the gradients of two half batches and add them. The
upstream test trains on ``cuda:<rank>`` when CUDA is present and on the CPU otherwise;
``--device`` picks.

    CS336_KIT_REFERENCE=reference PYTHONPATH=DEPS:UP/cs336-basics \\
        python autograder/peer_checks/bitwise_floor.py UP
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch


def train(upstream: str, steps: int = 3, device: str = "cpu") -> list[list[tuple[str, float]]]:
    """Per step, [(parameter name, max |difference|)] between one process and exact data parallelism on ``device``."""
    sys.path.insert(0, upstream)
    from tests.test_fsdp import ToyFSDPModel  # the upstream test's model

    torch.use_deterministic_algorithms(True)
    torch.manual_seed(42)
    whole = ToyFSDPModel(vocab_size=100, d_model=64, d_ff=128).to(device)
    halves = [copy.deepcopy(whole), copy.deepcopy(whole)]
    torch.manual_seed(123)
    tokens = torch.randint(0, 100, (20, 8), device=device)
    labels = torch.randint(0, 100, (20,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    report = []
    for step in range(steps):
        for model in (whole, *halves):
            model.zero_grad(set_to_none=True)
        loss_fn(whole(tokens)[:, -1, :].float(), labels).backward()
        for rank, model in enumerate(halves):
            rows = slice(rank * 10, (rank + 1) * 10)
            loss_fn(model(tokens[rows])[:, -1, :].float(), labels[rows]).backward()
        with torch.no_grad():
            for p_whole, p0, p1 in zip(whole.parameters(), *(h.parameters() for h in halves)):
                mean = (p0.grad + p1.grad) / 2
                p_whole -= 0.01 * p_whole.grad
                p0 -= 0.01 * mean
                p1 -= 0.01 * mean
        report.append([(name, (a - b).abs().max().item())
                       for (name, a), b in zip(whole.named_parameters(), halves[0].parameters())
                       if not torch.equal(a, b)])
        torch.manual_seed(42 + step)
        order = torch.randperm(20).to(device)
        tokens, labels = tokens[order], labels[order]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", help="checkout of stanford-cs336/assignment2-systems (2026), router in place")
    parser.add_argument("--device", default="cpu", help="where to train: cpu (the test's device without CUDA) or "
                        "cuda (the test's device when CUDA is present)")
    args = parser.parse_args(argv)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, {where}")
    for step, differing in enumerate(train(args.upstream, device=args.device)):
        shown = ", ".join(f"{name} {diff:.3g}" for name, diff in differing) or "none"
        print(f"step {step}: parameters not bitwise equal: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
