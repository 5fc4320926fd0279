"""§1.7 nested_checkpointing: a checkpointing plan whose peak activation memory grows as O(log N).

You write ``nested_checkpoint_plan`` (see handout/README.md, §1.7). It returns a plan, not a
forward: the tests price the plan on a model of the memory, the one the handout defines.
"""

from __future__ import annotations

from cs336_systems._not_implemented import not_implemented

_SECTION = "§1.7 nested_checkpointing"


def nested_checkpoint_plan(num_layers: int) -> int | list:
    """A nested checkpointing plan for a chain of ``num_layers`` layers with O(log N) peak memory.

    A plan is either
    - an int ``k >= 1``: ``k`` consecutive layers run plainly; their backward holds all ``k``
      layers' activations (``k`` units of memory), or
    - a list of plans (at least one): a checkpointed group. Its forward keeps only the input of
      each member; its backward goes through the members last to first, recomputing each
      member's forward (by its own plan) and running its backward. While member ``i`` (from 0)
      is processed, the inputs of members ``0 .. i - 1`` are still held.

    The memory model (in units of one layer's activations): ``peak(k) = k``, and
    ``peak([p_0, ..., p_m]) = max over i of (i + peak(p_i))``. The layers a plan covers:
    ``k`` for an int, the sum of its members' for a list.

    Requirements, checked by the tests for every ``num_layers`` from 1 to 4096:
    - the plan covers exactly ``num_layers`` layers;
    - ``peak(plan) <= 2 * ceil(log2(num_layers)) + 2`` (O(log N));
    - the forwards it runs, ``forwards(k) = k`` and ``forwards([p_0..p_m]) = sum(layers(p_i)) +
      sum(forwards(p_i))`` (one forward of the group, then each member recomputed), are at most
      ``num_layers * (ceil(log2(num_layers)) + 2)`` (O(N log N): the price of the memory);
    - nesting at most 64 levels deep, and plain Python ints and lists only.

    Raises:
        ValueError: ``num_layers`` is not an int >= 1.
    """
    raise not_implemented(__file__, "nested_checkpoint_plan", _SECTION)
