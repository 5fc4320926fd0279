"""The patch check: any replaced clock, added tensor method or global mode is found and named."""

import time

import torch
from torch.overrides import TorchFunctionMode

from leaderboard.timer_guard import capture_clock, check_untampered, find_patches, snapshot


def test_nothing_changed_nothing_found():
    before = snapshot()
    torch.randn(4).sum()
    assert find_patches(before) == []
    assert check_untampered(before, "now") is None


def test_a_wrapped_perf_counter_is_found(monkeypatch):
    before = snapshot()
    original = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: 0.5 * original())
    refusal = check_untampered(before, "after the first call")
    assert refusal.code == "patched_timers"
    assert "time.perf_counter was replaced" in refusal.message and "after the first call" in refusal.message


def test_a_halved_event_elapsed_time_is_found(monkeypatch):
    before = snapshot()
    original = torch.cuda.Event.elapsed_time
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.5 * original(self, end))
    assert "torch.cuda.Event.elapsed_time was replaced" in find_patches(before)


def test_a_method_added_to_tensor_is_found(monkeypatch):
    before = snapshot()
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: None)  # shadows the real one
    assert "torch.Tensor.backward was replaced" in find_patches(before)
    monkeypatch.setattr(torch.Tensor, "sum", lambda self, *a, **k: self, raising=False)  # TensorBase's, shadowed
    assert "torch.Tensor.sum was added" in find_patches(before)


def test_a_global_torch_function_mode_is_found():
    before = snapshot()

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Spy():
        assert "a global Spy is active" in find_patches(before)
    with torch.device("cpu"):  # what torch.set_default_device installs: allowed
        assert find_patches(before) == []


def test_captured_clock_survives_a_later_patch(monkeypatch):
    clock = capture_clock(cuda=False)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert clock.perf_counter() > 0.0  # still the real one
    assert clock.do_bench is None and clock.Event is None
