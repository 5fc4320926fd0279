"""A CPU model of ``bwd_ws2_kernel``'s mbarrier protocol (backward_kernels_ws2.py): deadlocks, parity
aliasing and buffer hazards under random interleavings of its three partitions.

Each partition is a generator of its barrier operations in program order (the kernel's order:
``consumer`` mirrors ``_ws2_consumer``, ``loader`` ``_ws2_loader``). ``Bar`` has mbarrier semantics:
a phase completes after ``count`` arrivals, ``wait(parity)`` passes while the current phase's parity
differs from ``parity`` (so a barrier two phases ahead of its waiter aliases). Shared buffers (ring
slots, dS^T buffers, the mode-0 hand-over tile) carry the step that last wrote them; a "check" is a
read that must still see its step (for an async wgmma: at issue and again at its wait). A run fails on
a deadlock (no partition can move) or a hazard (a read sees another step's data).

    python -m benchmarks.gluon.ws2_protocol_model     # ws2 modes 0-2, ws3 "lean1"/"lean2"; 2-4 slots,
                                                      # n_steps 0-12; exit 0 iff clean

Found with it (mutations of this model, 2026-12-07): ds_free is implied by the other waits (ring
back-pressure and, per step, ds_full): removing it leaves the model clean; it stays in the kernel as
a guard. One ds_full barrier per consumer (parity i & 1) instead of one per (consumer, buffer)
deadlocks in mode 2 without ds_free (38 of 19,200 runs: the barrier runs two phases ahead and its
parity aliases) and is clean with it. The removed ``dq_free`` wait of mode 0 is caught (deadlocks
and hazards), so the model does see missing waits.

ws3 (``consumer_lean``, 2026-12-07): "lean1" and "lean2" are clean with 3 and 4 slots. "lean2" with 2
slots deadlocks (every run with n >= 3): consumer 0 releases slot i - 1 at the end of step i, after
it waited for ready(i + 1), which with 2 slots is the refill of that very slot; hence the kernel's
static_assert SLOTS >= 3 in mode 2. "lean1" releases before its ready wait and is clean with 2.
"""
import random
import sys

class Bar:
    def __init__(s, count): s.count, s.arr, s.ph = count, 0, 0
    def arrive(s):
        s.arr += 1
        if s.arr == s.count: s.arr, s.ph = 0, s.ph + 1
    def passes(s, parity): return (s.ph & 1) != parity

def loader(n, S):
    for i in range(n):
        slot = i % S
        yield ("wait", ("empty", slot), ((i // S) & 1) ^ 1)
        yield ("write", ("ring", slot), i)
        yield ("arrive", ("ready", slot))

def consumer(c, n, S, mode):
    o = 1 - c
    if n > 0:
        yield ("wait", ("ready", 0), 0)
        yield ("check", ("ring", 0), 0)
    for i in range(n):
        slot, buf = i % S, i % 2
        owner = buf == c
        if (mode == 1 and not owner) or mode == 2:
            yield ("wait", ("ds_free", 2 * c + buf), ((i // 2) & 1) ^ 1)
        yield ("write", ("ds", c, buf), i)
        if mode == 1:
            if not owner:
                yield ("arrive", ("ds_full", 2 * c + buf))
            else:
                yield ("wait", ("ds_full", 2 * o + buf), (i // 2) & 1)
                yield ("check", ("ds", o, buf), i)
                yield ("check", ("ds", o, buf), i)  # wgmma completes (wait 0)
                yield ("arrive", ("ds_free", 2 * o + buf))
        if mode == 2:
            yield ("arrive", ("ds_full", 2 * c + buf))
            yield ("wait", ("ds_full", 2 * o + buf), (i // 2) & 1)
            yield ("check", ("ds", o, buf), i)
        if i + 1 < n:
            yield ("wait", ("ready", (i + 1) % S), ((i + 1) // S) & 1)
            yield ("check", ("ring", (i + 1) % S), i + 1)
        if mode == 2:
            yield ("check", ("ds", o, buf), i)  # wait(1): dQ wgmma complete
        yield ("check", ("ring", slot), i)
        yield ("arrive", ("empty", slot))
        if mode == 0:
            if c == 1:
                yield ("wait", ("dq_free", 0), (i & 1) ^ 1)
                yield ("write", ("hand",), i)
                yield ("arrive", ("dq_full", 0))
            else:
                yield ("wait", ("dq_full", 0), i & 1)
                yield ("check", ("hand",), i)
                yield ("arrive", ("dq_free", 0))
        if mode == 2:
            yield ("arrive", ("ds_free", 2 * o + buf))

def consumer_lean(c, n, S, mode):
    """``_ws3_consumer`` / ``_ws3_step`` (backward_kernels_ws3.py): modes 1 (alternating owner) and 2
    (split) without ds_free; empty[s] has count 1 and is arrived once per step, in step i, for the
    slot of step i - 1 (mode 1: by step i's owner after its ds_full wait; mode 2: by consumer 0 after
    its wait(1) of step i, which follows its ds_full wait)."""
    o = 1 - c
    if n > 0:
        yield ("wait", ("ready", 0), 0)
        yield ("check", ("ring", 0), 0)
    for i in range(n):
        slot, buf = i % S, i % 2
        owner = buf == c
        yield ("check", ("ring", slot), i)  # dP^T, dV, dK read the slot (again at the wait(1) below)
        yield ("write", ("ds", c, buf), i)
        if mode == 1:
            if owner:
                yield ("wait", ("ds_full", 2 * o + buf), (i // 2) & 1)
                if i > 0:
                    yield ("arrive", ("empty", (i - 1) % S))
                yield ("check", ("ds", o, buf), i)  # dQ wgmma issued (completes at wait(0) in the rolled loop)
                yield ("check", ("ds", c, buf), i)
                yield ("check", ("ds", o, buf), i)
            else:
                yield ("arrive", ("ds_full", 2 * c + buf))
        else:
            yield ("arrive", ("ds_full", 2 * c + buf))
            yield ("wait", ("ds_full", 2 * o + buf), (i // 2) & 1)
            yield ("check", ("ds", o, buf), i)  # dQ wgmma issued
        if i + 1 < n:
            yield ("wait", ("ready", (i + 1) % S), ((i + 1) // S) & 1)
            yield ("check", ("ring", (i + 1) % S), i + 1)
        yield ("check", ("ring", slot), i)  # wait(1): dV, dK (and dQ) complete
        if mode == 2:
            yield ("check", ("ds", o, buf), i)
            if c == 0 and i > 0:
                yield ("arrive", ("empty", (i - 1) % S))


def run(n, S, mode, seed):
    rng = random.Random(seed)
    bars = {}
    def bar(key):
        if key not in bars:
            bars[key] = Bar(2 if key[0] == "empty" and mode in (0, 1, 2) else 1)
        return bars[key]
    mem = {}
    if mode in (0, 1, 2):
        actors = [consumer(0, n, S, mode), loader(n, S), consumer(1, n, S, mode)]
    else:  # "lean1", "lean2": ws3
        actors = [consumer_lean(0, n, S, int(mode[-1])), loader(n, S), consumer_lean(1, n, S, int(mode[-1]))]
    pending = [next(a, None) for a in actors]
    while any(p is not None for p in pending):
        runnable = [k for k, p in enumerate(pending) if p is not None and (p[0] != "wait" or bar(p[1]).passes(p[2]))]
        if not runnable:
            return f"DEADLOCK n={n} S={S} mode={mode} seed={seed}: {pending}"
        k = rng.choice(runnable)
        op = pending[k]
        if op[0] == "arrive": bar(op[1]).arrive()
        elif op[0] == "write": mem[op[1]] = op[2]
        elif op[0] == "check" and mem.get(op[1]) != op[2]:
            return f"HAZARD n={n} S={S} mode={mode} seed={seed} actor={k}: {op} found {mem.get(op[1])}"
        pending[k] = next(actors[k], None)
    return None

def main() -> int:
    bad = 0
    modes = (0, 1, 2, "lean1", "lean2")
    runs = 0
    for mode in modes:
        for S in (2, 3, 4):
            if mode == "lean2" and S == 2:
                continue  # deadlocks by design (ws3 asserts SLOTS >= 3 in mode 2): see the docstring
            for n in (0, 1, 2, 3, 4, 5, 7, 12):
                for seed in range(400):
                    r = run(n, S, mode, seed)
                    runs += 1
                    if r:
                        bad += 1
                        if bad < 6:
                            print(r)
    print(f"ws2/ws3 protocol model: {bad} failing runs of {runs}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
