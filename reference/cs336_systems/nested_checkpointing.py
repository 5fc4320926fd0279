"""§1.7 nested_checkpointing (the reference): halve the chain, checkpoint both halves, recurse.

Staff only. With ``peak([p_0, p_1]) = max(peak(p_0), 1 + peak(p_1))``, splitting N layers into
two halves gives peak(N) <= 1 + peak(ceil(N / 2)) with peak(1) = 1, so peak(N) <= 1 + ceil(log2 N);
each level recomputes every layer once, so the forwards are N (ceil(log2 N) + 1) at most.
"""

from __future__ import annotations


def nested_checkpoint_plan(num_layers: int) -> int | list:
    """See the stub's docstring (cs336_systems/nested_checkpointing.py)."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be an int >= 1; got {num_layers!r}")
    if num_layers <= 2:
        return num_layers
    half = num_layers // 2
    # The later member is processed first in the backward, with one held input (the earlier member's):
    # give it the smaller half.
    return [nested_checkpoint_plan(num_layers - half), nested_checkpoint_plan(half)]
