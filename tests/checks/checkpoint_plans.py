"""§1.7's model of memory: price a nested checkpointing plan, and judge it against the O(log N) bound.

Read by tests/test_nested_checkpointing.py and its hidden twin. A plan is an int k >= 1 (k
layers run plainly) or a non-empty list of plans (a checkpointed group); see the stub's
docstring (cs336_systems/nested_checkpointing.py) for the model these functions compute.
"""

from __future__ import annotations

import math

MAX_DEPTH = 64


def _check_shape(plan, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise AssertionError(f"the plan nests more than {MAX_DEPTH} levels deep")
    if isinstance(plan, bool) or not isinstance(plan, (int, list)):
        raise AssertionError(f"a plan is an int >= 1 or a list of plans; found {type(plan).__name__} {plan!r:.60}")
    if isinstance(plan, int) and plan < 1:
        raise AssertionError(f"a plain run covers at least one layer; found {plan}")
    if isinstance(plan, list):
        if not plan:
            raise AssertionError("a checkpointed group needs at least one member; found []")
        for member in plan:
            _check_shape(member, depth + 1)


def layers(plan) -> int:
    return plan if isinstance(plan, int) else sum(layers(member) for member in plan)


def peak(plan) -> int:
    """Peak memory in layers' activations: k for k plain layers; max_i (i + peak(member i)) for a group."""
    return plan if isinstance(plan, int) else max(i + peak(member) for i, member in enumerate(plan))


def forwards(plan) -> int:
    """Layer forwards run: k for k plain layers; the group's forward plus each member's own for a group."""
    return plan if isinstance(plan, int) else layers(plan) + sum(forwards(member) for member in plan)


def memory_bound(n: int) -> int:
    return 2 * math.ceil(math.log2(n)) + 2


def compute_bound(n: int) -> int:
    return n * (math.ceil(math.log2(n)) + 2)


def check_plan(plan, n: int) -> None:
    """AssertionError naming what ``plan`` for ``n`` layers gets wrong (coverage, memory, compute)."""
    _check_shape(plan)
    assert layers(plan) == n, f"the plan for {n} layers covers {layers(plan)} layers; it must cover exactly {n}"
    assert peak(plan) <= memory_bound(n), (
        f"the plan for {n} layers peaks at {peak(plan)} layers' activations; O(log N) allows at most "
        f"2 * ceil(log2 {n}) + 2 = {memory_bound(n)} (a one-level plan peaks near 2 sqrt(N): nest the groups)")
    assert forwards(plan) <= compute_bound(n), (
        f"the plan for {n} layers runs {forwards(plan)} layer forwards; at most N (ceil(log2 N) + 2) = "
        f"{compute_bound(n)} are allowed (recompute each layer once per level)")
