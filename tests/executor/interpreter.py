"""Make Triton's CPU interpreter run kernels written for the GPU: one autotune config.

Read by the executor (``server.py``) and by the root ``conftest.py`` (tests run without
``--isolate``), which call ``single_autotune_config()`` before the submission imports triton,
only when ``TRITON_INTERPRET=1``. Under triton 3.6's interpreter, ``@triton.autotune`` with two
or more configs fails with "0 active drivers" as soon as it tries to benchmark them, although
the same kernel runs on a GPU. With this, every autotuner keeps one config: the first, or the
one at index ``$CS336_INTERPRET_AUTOTUNE_CONFIG`` (handout §2.4), so the kernel is graded with
a config it really has.
"""

from __future__ import annotations

import os

ENV_VAR = "CS336_INTERPRET_AUTOTUNE_CONFIG"


def single_autotune_config() -> None:
    """Wrap ``Autotuner.__init__`` so that it keeps one config (no-op if already wrapped)."""
    from triton.runtime import autotuner

    original = autotuner.Autotuner.__init__
    if getattr(original, "_cs336_single_config", False):
        return

    def init_with_one_config(self, fn, arg_names, configs, *args, **kwargs):
        configs = list(configs)
        if len(configs) > 1:
            try:
                index = int(os.environ.get(ENV_VAR, "0"))
            except ValueError:
                index = 0
            configs = [configs[min(max(index, 0), len(configs) - 1)]]
        original(self, fn, arg_names, configs, *args, **kwargs)

    init_with_one_config._cs336_single_config = True
    autotuner.Autotuner.__init__ = init_with_one_config
