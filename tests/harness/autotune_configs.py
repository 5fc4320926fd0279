"""Run a check once per config of the submission's ``@triton.autotune`` kernels (handout §2.4).

Used by the tests named ``..._every_autotune_config`` through the ``each_autotune_config``
fixture (root ``conftest.py``). Which config an autotuner keeps depends on timings, so it can
differ from one GPU, load or shape to the next: every config must be right. The other
correctness tests run one config each (the first that fits; ``tests/executor/autotune.py``);
these run the check with config 0 of every autotuner, then config 1, and so on, until every
autotuner's configs (after its own pruning, at most ``MAX_CONFIGS``) have run. The outputs are
compared here, by the test; the submission's side says only how many configs its autotuners
have, which sets how many times the check runs: a count it understates can only leave the check
as strict as the other tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from tests.harness import gpus

MAX_CONFIGS = 8  # configs checked per autotuner (the handout says so): 8 backward configs fit a test's 120 s

# The visible every-config tests' shape: ragged for every tile size up to 128 (smaller under the
# interpreter, which is slow).
EVERY_CONFIG_SHAPE = (dict(batch=2, n_queries=130, n_keys=203, d=64) if gpus.count()
                      else dict(batch=1, n_queries=70, n_keys=45, d=32))


class EachAutotuneConfig:
    """Runs checks once per autotune config, in the executor (``executor``) or in this process."""

    def __init__(self, executor=None):
        self.executor = executor

    @contextlib.contextmanager
    def _config(self, index: int, backward_only: bool) -> Iterator[Callable[[], int]]:
        if self.executor is not None:
            with self.executor.autotune_config(index, ("backward",) if backward_only else None):
                yield lambda: self.executor.autotune_configs
            return
        from tests.executor import autotune

        with autotune.autotune_mode(autotune.config_mode(index)) as tally:
            yield lambda: tally.configs

    def run(self, check: Callable[[], None], backward_only: bool = False) -> int:
        """Run ``check()`` once per config; return how many configs ran. A failure names the config.

        ``backward_only``: under the executor, only the backward passes run config n (the forward
        keeps its first config, and its configs are the forward tests' to check), which halves
        the kernels compiled; in this process the forward runs config n too."""
        index, total = 0, 1
        while index < min(total, MAX_CONFIGS):
            with self._config(index, backward_only) as configs_seen:
                try:
                    check()
                except AssertionError as failure:
                    raise AssertionError(f"{_which(index, configs_seen())}: {failure}") from None
                except Exception as error:
                    error.add_note(_which(index, configs_seen()))
                    raise
                total = max(total, configs_seen())
            index += 1
        return index


def _which(index: int, total: int) -> str:
    if total <= 1:
        return "with your kernels as they are (no @triton.autotune with two or more configs ran)"
    return (f"with config {index} of {total} of your autotuned kernels (counted from 0, after your "
            f"prune_configs_by; every config must be right, handout §2.4; on a CPU, rerun with "
            f"CS336_INTERPRET_AUTOTUNE_CONFIG={index})")
