"""The cheat checks' decisions, on numbers and tensors made up to sit on each side of a bound."""

import pytest
import torch

from leaderboard.config import LIMITS
from leaderboard.detectors import (
    REASONS,
    Refusal,
    check_fixed_vs_fresh,
    check_floor,
    check_ones_vs_random,
    check_plain_tensor,
    check_unchanged,
    check_wall_vs_event,
)


def test_refusal_codes_are_the_documented_ones():
    assert Refusal("side_stream", "x").code == "side_stream"
    with pytest.raises(ValueError, match="unknown refusal code"):
        Refusal("made_up", "x")


@pytest.mark.parametrize(
    "wall_ms, event_ms, refused",
    [
        (50.4, 50.0, False),  # honest: the events span the same work
        (3.0, 2.5, False),  # launch-bound but honest: the events span the idle gaps too
        (600.0, 1.2, True),  # work on a side stream: the events saw almost nothing
        (160.0, 100.0, True),  # a third of the work hidden
    ],
)
def test_wall_clock_vs_cuda_events(wall_ms, event_ms, refused):
    refusal = check_wall_vs_event(wall_ms, event_ms, calls=10, limits=LIMITS)
    assert (refusal is not None) == refused
    if refused:
        assert refusal.code == "side_stream" and "wait_stream" in refusal.message


def test_fixed_inputs_much_faster_than_fresh_inputs_is_caching():
    assert check_fixed_vs_fresh(9.0, 10.0, limit=0.25) is None
    refusal = check_fixed_vs_fresh(0.2, 60.0, limit=0.25)
    assert refusal.code == "cached_outputs"


def test_ones_dO_much_faster_than_random_dO_is_specialising():
    assert check_ones_vs_random(10.1, 10.0, limit=0.10) is None  # ones may even be slower
    assert check_ones_vs_random(9.5, 10.0, limit=0.10) is None  # noise
    assert check_ones_vs_random(7.0, 10.0, limit=0.10).code == "ones_dO"


def test_floor():
    assert check_floor(5.0, 2.77, 1.92e12, 696.0) is None
    refusal = check_floor(0.3, 2.77, 1.92e12, 696.0)
    assert refusal.code == "below_floor" and "2.770 ms" in refusal.message


class Tagged(torch.Tensor):
    pass


def test_only_plain_tensors_pass():
    t = torch.zeros(3)
    assert check_plain_tensor(t, "O") is None
    for value in (t.as_subclass(Tagged), torch.nn.Parameter(t), t.numpy(), [t]):
        refusal = check_plain_tensor(value, "O")
        assert refusal.code == "lazy_output", value


def test_a_single_changed_element_is_a_mutation():
    q = torch.randn(2, 8, 4)
    copies = {"Q": q.clone(), "dO": q.clone()}
    assert check_unchanged(copies, {"Q": q, "dO": q}) is None
    q[1, 7, 3] += 1e-3
    refusal = check_unchanged(copies, {"Q": q, "dO": q})
    assert refusal.code == "mutated_inputs" and "Q" in refusal.message


def test_every_reason_has_a_description():
    assert all(isinstance(text, str) and len(text) > 20 for text in REASONS.values())
