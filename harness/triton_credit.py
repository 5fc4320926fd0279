"""Triton credit for an executor's calls: each call of the Triton Function, and each backward of
one, is judged on a replay of its kernels' launches (replay.py) on the harness's own values.

Read by staff changing what a Triton call must reproduce. ``TritonCredit`` is a part of
``client.Executor`` (a mixin): ``_forward_call`` and ``_backward_call`` say what the harness knows
of a call (its inputs, the values it can recompute, for a backward the L its forward's replay
computed) and which outputs the replay must reproduce; ``_check_replay`` asks the replay process
and turns a refusal into the tests' own mismatch error where the output is plainly wrong. It reads
the executor's state for the call in flight: ``settings``, ``_inputs``, ``_call_args``,
``_last_graph``, ``_triton_graphs``, the every-config loop's ``_autotune_config`` /
``_autotune_ops`` / ``autotune_configs``, and the test's ``budget``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from executor.wire import ProtocolError

from . import replay as replays


class TritonCredit:
    """The replay checks of ``client.Executor`` (see the module docstring)."""

    def replays(self) -> replays.Replays:
        if self._replays is None:
            work = self.settings.workdir
            uid = self.settings.replay_uid if self.settings.replay_uid is not None else self.settings.uid
            self._replays = replays.Replays(self.settings.submission, dataclasses.replace(
                self.settings, workdir=work.with_name(work.name + "-replay"), uid=uid, gid=uid,
                compile_cache=self.settings.replay_cache))
        return self._replays

    def _count_configs(self, launched: set[tuple[str, str]], reported) -> None:
        """How many configs the every-config loop runs: read from the source of the autotuned kernels
        that ran (``kernels_only.py``); the executor's own count only where the source cannot be read."""
        if not launched:
            return
        kernels = self.replays().kernels
        self.autotune_configs = max(self.autotune_configs, kernels.config_count(launched))
        unreadable = any(key in kernels.autotune and kernels.autotune[key] is None for key in launched)
        if unreadable and type(reported) is int and reported > 0:
            self.autotune_configs = max(self.autotune_configs, reported)

    def _config_for(self, op: str) -> int | None:
        if self._autotune_config is not None and (self._autotune_ops is None or op in self._autotune_ops):
            return self._autotune_config
        return None

    def _forward_call(self, value: Any) -> replays.Call:
        tensors = [t for t in self._inputs if isinstance(t, torch.Tensor)]
        args, kwargs = self._call_args
        is_causal = bool(args[3]) if len(args) > 3 else bool(kwargs.get("is_causal", False))
        Q, K, V = (t.detach() for t in (tensors + [torch.empty(0)] * 3)[:3])
        output = value if isinstance(value, torch.Tensor) else next(
            (v for v in (value if isinstance(value, (list, tuple)) else ()) if isinstance(v, torch.Tensor)), None)
        self._causal = is_causal
        call = replays.Call(known={"Q": Q, "K": K, "V": V}, outputs={"O": output} if output is not None else {},
                            d=int(Q.shape[-1]) if Q.dim() else 1, config=self._config_for("call"), what="forward")
        if self._last_graph is not None and output is not None:  # its backward's replay reads call.replayed
            self._triton_graphs[self._last_graph] = {"Q": Q, "K": K, "V": V, "O": output.detach(),
                                                     "is_causal": is_causal, "forward": call}
        return call

    def _backward_call(self, saved: dict, grad: torch.Tensor, grads: list) -> replays.Call:
        from harness.flash_reference import attention_float64

        Q, K, V, O = saved["Q"], saved["K"], saved["V"], saved["O"]
        L = attention_float64(Q, K, V, saved["is_causal"]).L
        dO = grad.detach()
        D = (dO.to(torch.float64) * O.to(torch.float64)).sum(-1)
        outputs = {name: g for name, g in zip(("dQ", "dK", "dV"), grads) if isinstance(g, torch.Tensor)}
        self._causal = saved["is_causal"]
        known = {"Q": Q, "K": K, "V": V, "O": O, "dO": dO, "L": L, "D": D}
        # The L the forward's replay computed, as the backward's kernels get it from the forward: a
        # kernel's own L agrees with its own scores, where the float64 L is off from tf32 scores by
        # up to 150 * 2^-11 at large logits (the correct base lost the hidden large_logits backward).
        replayed = saved["forward"].replayed  # filled by the forward's check
        for index, tensor in enumerate(t for t in replayed if t.is_floating_point() and t.numel() == L.numel()):
            known[f"L from your forward's replay #{index}"] = tensor
        return replays.Call(known=known, outputs=outputs,
                            d=int(Q.shape[-1]), config=self._config_for("backward"), what="backward")

    def _wrong_output(self, call: replays.Call) -> AssertionError | None:
        """The tests' own mismatch error if one of ``call``'s outputs is wrong, else None: a
        submission whose values are wrong fails on them, and learns what was wrong, before any
        replay verdict (and without the replay's error chained to it: that is the grader's)."""
        from harness.assertions import assert_close
        from harness.flash_reference import attention_float64
        from harness.flash_tolerances import tolerance

        known = call.known
        if call.what == "forward":
            truth = {"O": attention_float64(known["Q"], known["K"], known["V"], self._causal).O}
        else:
            result = attention_float64(known["Q"], known["K"], known["V"], self._causal, known["dO"])
            truth = {"dQ": result.dQ, "dK": result.dK, "dV": result.dV}
        for name, output in call.outputs.items():
            if name in truth:
                tol = tolerance(output.dtype, name, "triton")
                atol = tol.atol * replays.value_scale(call, name) + tol.max_frac * float(truth[name].abs().max())
                try:
                    assert_close(output, truth[name], atol=atol,
                                 rtol=tol.rtol, what=name, context=f"the Triton Function's {call.what}")
                except AssertionError as error:
                    return error
        return None

    def _check_replay(self, record: Any, call: replays.Call, began: float) -> None:
        """Raise replay.NoCredit unless the replay reproduces the call's outputs. Its time is the
        grader's, not the test's."""
        try:
            if record is None:
                raise replays.NoCredit(f"the Triton Function's {call.what} sent no record of its launches to replay")
            try:
                self.replays().check(record, call, self._noted)
            except ProtocolError as error:
                raise replays.NoCredit(f"the Triton Function's {call.what} sent a launch record the grader "
                                       f"cannot replay ({error})") from None
            except replays.NoCredit:
                wrong = self._wrong_output(call)
                if wrong is not None:  # a wrong output is the test's verdict to give, in its own words
                    raise wrong from None
                raise
        finally:
            if self.budget is not None:
                self.budget.exclude(time.monotonic() - began)
                self.deadline = self.budget.wall_deadline()
