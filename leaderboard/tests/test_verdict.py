"""The parent's judgement of a worker's messages: order, correctness in the parent, brackets.

Each test builds the messages a worker would send for the CPU problem (the outputs computed
with the reference itself), stamps them as the parent would on arrival, and changes one thing.
"""

import pytest
import torch

from leaderboard import config
from leaderboard.gate import GATED, check_inputs, checked_batch_element
from leaderboard.kernels import ProfiledEvent
from leaderboard.protocol import Message
from leaderboard.verdict import Judgement, Observed, Run, check_profile, judge
from harness.flash_reference import attention_float64

RUN = Run("cpu", 1, seed=7, triton_names={"flash_fwd_kernel"})
MATMUL = lambda: (0.05, "256^3 float32")  # noqa: E731: 0.05 TFLOP/s: a floor far below the times below


def outputs(run: Run, label: str) -> dict[str, torch.Tensor]:
    p = run.problem
    if label == "gate":
        q, k, v, do = check_inputs(p, run.seed, "gate", 4)
        want = attention_float64(q, k, v, p.is_causal, do)
    else:
        b = checked_batch_element(p, run.seed, label)
        q, k, v = check_inputs(p, run.seed, label, 3)[:, b : b + 1]
        want = attention_float64(q, k, v, p.is_causal, torch.ones_like(q))
    return {name: getattr(want, name).to(p.dtype) for name in GATED}


def honest(run: Run = RUN, times_ms=(50.0, 52.0, 51.0), bracket_ms=400.0) -> list[Message]:
    """The messages of a worker that finished, every timing bracket ``bracket_ms`` long."""
    clock = [0.0]

    def at(header, tensors=None, after_ms=1.0):
        clock[0] += after_ms / 1e3
        return Message(header, tensors or {}, clock[0])

    def timing(label):
        return [at({"type": "timing_start", "label": label}), at({"type": "timing_end", "label": label, "times_ms": list(times_ms)}, after_ms=bracket_ms)]

    messages = [at({"type": "hello"}), at({"type": "gate"}, outputs(run, "gate")),
                at({"type": "launches", "record": {"launches": [], "storages": []}, "forward": 0})]
    for i in range(run.limits.fresh_input_repeats):
        label = f"fresh_{i + 1}"
        b = checked_batch_element(run.problem, run.seed, label)
        messages.append(at({"type": "fresh", "label": label, "batch": b}, outputs(run, label)))
    messages += timing("fresh_inputs")
    messages.append(at({"type": "profile", "forward": [["aten::mm", False, 5.0, 1]], "both": [], "launched": ["flash_fwd_kernel"]}))
    for i in range(run.repeats):
        messages += timing(f"official_{i + 1}")
    messages += timing("random_dO")
    return messages + [at({"type": "done", "checks": {"lazy_output": "passed"}, "info": {"function": "m.F"}, "environment": {}})]


def codes(judgement: Judgement) -> list[str]:
    return [r["code"] for r in judgement.refusals]


def test_a_complete_consistent_report_is_accepted():
    judgement = judge(Observed(honest()), RUN, MATMUL)
    assert judgement.refusals == []
    assert judgement.fields["time_ms"] == 51.0 and judgement.fields["calls_timed"] == [3]
    assert {"incorrect", "forged_timing", "not_triton", "library_attention", "below_floor", "lazy_output"} <= set(judgement.checks)


def test_times_adding_up_to_more_than_the_parents_bracket_are_forged():
    judgement = judge(Observed(honest(bracket_ms=100.0)), RUN, MATMUL)  # 153 ms of calls in 100 ms
    assert "forged_timing" in codes(judgement)
    assert "153.0 ms" in judgement.refusals[0]["message"] and "100.0 ms" in judgement.refusals[0]["message"]
    allowed = 150.0 * (1 + config.BRACKET_SLACK_REL) + config.BRACKET_SLACK_MS  # the allowance for the pipe's delay
    assert judge(Observed(honest(times_ms=(allowed - 0.1,), bracket_ms=150.0)), RUN, MATMUL).refusals == []
    assert "forged_timing" in codes(judge(Observed(honest(times_ms=(allowed + 0.1,), bracket_ms=150.0)), RUN, MATMUL))


@pytest.mark.parametrize(
    "change, code, words",
    [
        (lambda m: [m[0], m[-1]], "protocol", "expected gate, got 'done'"),  # done straight after hello
        (lambda m: m[1:], "protocol", "expected hello"),
        (lambda m: m + [m[-1]], "protocol", "after the worker's last message"),
        (lambda m: m[:6] + m[7:], "protocol", "expected timing_start"),  # the fresh timing's start missing
        (lambda m: m[:-1], "error", "before its last message"),  # died before done
        (lambda m: m[:2] + [Message({"type": "refused", "refusals": [{"code": "timeout", "message": "x"}]})], "protocol", "malformed reason"),
        (lambda m: m[:2] + [Message({"type": "refused", "refusals": [{"code": "side_stream", "message": "x"}]})], "side_stream", "x"),
    ],
)
def test_messages_out_of_order_or_missing_are_refused(change, code, words):
    judgement = judge(Observed(change(honest())), RUN, MATMUL)
    assert codes(judgement) == [code] and words in judgement.refusals[0]["message"]
    assert "time_ms" not in judgement.fields


def test_outputs_are_checked_in_the_parent():
    messages = honest()
    messages[1] = Message({"type": "gate"}, {name: torch.zeros_like(t) for name, t in messages[1].tensors.items()}, messages[1].received)
    assert codes(judge(Observed(messages), RUN, MATMUL)) == ["incorrect"]
    stale = honest()
    stale[4].tensors.update(stale[3].tensors)  # the first fresh call's outputs again: a cache
    assert "cached_outputs" in codes(judge(Observed(stale), RUN, MATMUL))


def test_how_the_worker_ended_counts():
    assert codes(judge(Observed(honest(), exit_status=1), RUN, MATMUL)) == ["error"]
    assert codes(judge(Observed(honest()[:4], exit_status=None, timed_out=True, timeout_s=300), RUN, MATMUL)) == ["timeout"]
    assert codes(judge(Observed(honest()[:4], protocol_error="the stream ended in the middle of a frame"), RUN, MATMUL)) == ["protocol"]


def test_only_the_submissions_own_kernels_count_on_a_gpu():
    run = Run("quick", 1, seed=0, triton_names={"flash_fwd_kernel"})
    flex = Message({"type": "profile", "forward": [["triton_tem_fused_0", True, 6000.0, 1]], "both": [], "launched": []})
    judgement = Judgement()
    check_profile(flex, run, judgement)
    assert codes(judgement) == ["not_triton"] and judgement.fields["triton_share_forward"] == 0.0
    own = Message({"type": "profile", "forward": [["flash_fwd_kernel_0", True, 6000.0, 1], ["triton_poi_fused_0", True, 20.0, 1]], "both": [], "launched": []})
    judgement = Judgement()
    check_profile(own, run, judgement)
    assert judgement.refusals == [] and judgement.fields["triton_share_forward"] > 0.99
    assert ProfiledEvent("x", True, 1.0).on_gpu


def test_the_parents_replay_decides_after_every_message():
    from leaderboard.detectors import Refusal
    from leaderboard.replay import ReplayResult

    asked = []

    def replay(verdict):
        def judge_record(record, forward, time_ms):
            asked.append((record, forward, time_ms))
            return verdict
        return judge_record

    judgement = judge(Observed(honest()), RUN, MATMUL, replay(ReplayResult(None, 40.0, "all 3 launches")))
    assert judgement.refusals == [] and judgement.fields["kernels_ms"] == 40.0
    assert asked[-1] == ({"launches": [], "storages": []}, 0, None if RUN.mode == "cpu" else 51.0)
    refused = judge(Observed(honest()), RUN, MATMUL, replay(ReplayResult(Refusal("not_replayed", "no O"))))
    assert codes(refused) == ["not_replayed"]
    faster = judge(Observed(honest()), RUN, MATMUL, replay(ReplayResult(Refusal("faster_than_kernels", "x"), 60.0)))
    assert codes(faster) == ["faster_than_kernels"]
    asked.clear()
    judge(Observed(honest()[:5], exit_status=1), RUN, MATMUL, replay(ReplayResult(None)))
    assert asked == []  # a worker that did not finish is refused before any replay


def test_the_official_time_may_not_beat_the_replayed_kernels():
    from leaderboard.replay import check_kernel_time

    assert check_kernel_time(4.9, 4.7, 0.05, "all 3 launches") is None
    assert check_kernel_time(4.6, 4.7, 0.05, "all 3 launches") is None  # within the allowance
    refusal = check_kernel_time(4.3, 4.7, 0.05, "the forward's 1 launches")
    assert refusal.code == "faster_than_kernels" and "4.700 ms" in refusal.message
    assert check_kernel_time(1.0, None, 0.05, "") is None  # nothing timed: nothing to compare
