"""Run each test once per config of the submission's ``@triton.autotune`` kernels (handout §2.4).

Which config an autotuner keeps depends on timings, so it can differ from one GPU, load or shape
to the next, and a verdict that rests on it is noise: every config must be right. So every test
but a timing test (marked ``timing``) checks every config:

- this module is a pytest plugin (``pytest_plugins`` in the root ``conftest.py``): it runs a test's
  body with config 0 of every autotuner, then config 1, and so on, until every autotuner's configs
  (after its own pruning, at most ``MAX_CONFIGS``) have run. A test that runs no autotuner with two
  or more configs runs once, as before; fixtures are set up once;
- the tests named ``..._every_autotune_config`` loop themselves, through the ``each_autotune_config``
  fixture, to vary only some requests' configs (``backward_only``) at shapes ragged for every tile;
- ``CS336_AUTOTUNE=full`` turns the loop off: every test tunes for real, as a grade without the
  speed-ups would.

A failure says which config it ran with only when an autotuner with two or more configs ran: a
PyTorch test, a part 2 test or a kernel without ``@triton.autotune`` fails with its own message.
This module's frames are hidden from tracebacks (``__tracebackhide__``): a student sees the
test's frames, not this plumbing.

All configs of a test share the test's time limit, as a real autotuner's benchmarking of them would.
The outputs are compared here, by the test; the submission's side says only how many configs its
autotuners have, which sets how many times the test runs: a count it understates can only leave
the test as strict as a one-config run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

from harness import gpus

__tracebackhide__ = True  # pytest leaves this module's frames out of a failure's traceback

MAX_CONFIGS = 8  # configs checked per autotuner (the handout says so): 8 backward configs fit a test's 120 s
FIXTURE = "each_autotune_config"  # tests that loop over configs themselves
AUTOTUNE_ENV = "CS336_AUTOTUNE"  # "full": every test's autotuners benchmark every config, no loop

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
        from executor import autotune

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
                    if configs_seen() <= 1:
                        raise  # no autotuner with configs to name: the test's own failure, as it is
                    raise AssertionError(f"{_which(index, configs_seen())}: {failure}").with_traceback(
                        failure.__traceback__) from None
                except Exception as error:
                    if configs_seen() > 1:
                        error.add_note(_which(index, configs_seen()))
                    raise
                total = max(total, configs_seen())
            index += 1
        return index


def _which(index: int, total: int) -> str:
    """Which config a failure ran with (only said when ``total``, the configs seen, is two or more)."""
    return (f"with config {index} of {total} of your autotuned kernels (counted from 0, after your "
            f"prune_configs_by; every config must be right, handout §2.4; on a CPU, rerun with "
            f"CS336_INTERPRET_AUTOTUNE_CONFIG={index})")


def loops_over_configs(item) -> bool:
    """Whether the plugin runs the pytest ``item`` once per config: a test of the submission (it
    uses the ``adapters`` fixture), not a timing test, not a test that loops itself, not under
    ``CS336_AUTOTUNE=full``."""
    fixtures = getattr(item, "fixturenames", ())
    return ("adapters" in fixtures and FIXTURE not in fixtures and item.get_closest_marker("timing") is None
            and os.environ.get(AUTOTUNE_ENV) != "full")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if not loops_over_configs(pyfuncitem):
        return None
    function = pyfuncitem.obj
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    EachAutotuneConfig(getattr(pyfuncitem.config, "executor", None)).run(lambda: function(**arguments))
    return True
