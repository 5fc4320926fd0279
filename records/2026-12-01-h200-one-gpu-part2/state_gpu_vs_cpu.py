"""Is optimizer state trained on a GPU within the per-tensor tolerance of the CPU truth? (AdamW 1e-2, 2 steps)

Run from the repo root: python3 records/2026-12-01-h200-one-gpu-part2/state_gpu_vs_cpu.py
"""
import sys
sys.path.insert(0, ".")
import torch
from tests import parallel_reference as reference
from tests.parallel_checks import assert_optimizer_state_close, assert_state_close, batch
from tests.executor.probes import parallel_models as models
from tests.executor.probes.ddp import make_optimizer, optimizer_state_of, state_of

for model in ("lm", "chain", "tied", "frozen"):
    init = reference.initial_state(model)
    inputs, targets = batch(model, 6, 1)
    truth = reference.train(model, init, inputs, targets, steps=2, optimizer="AdamW", lr=1e-2)
    net = reference.build(model)
    net.load_state_dict(init)
    net.cuda()
    opt = make_optimizer("AdamW", net.parameters(), 1e-2)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        # the two ranks' halves, averaged, as DDP does
        losses = [models.loss_of(model, net(inputs[i:i + 3].cuda()), targets[i:i + 3].cuda()) for i in (0, 3)]
        ((losses[0] + losses[1]) / 2).backward()
        opt.step()
    names = {id(p): n for n, p in net.named_parameters()}
    got = optimizer_state_of([opt], names)
    worst = max(((got[k].cpu() - v).abs().max().item() / max(v.abs().max().item(), 1e-30), k) for k, v in truth["optimizer_state"].items())
    assert_optimizer_state_close(got, truth["optimizer_state"], what="state", context=model)
    assert_state_close(state_of(net), truth["states"][-1], what="param", context=model)
    print(model, "ok; worst |diff| / max|expected|:", f"{worst[0]:.2e}", worst[1])
