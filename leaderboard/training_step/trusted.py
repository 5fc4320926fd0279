"""The trusted training run the gate compares with: one process, the whole global batch, plain AdamW.

Read by ``run.py``. The run itself is harness/training_step.py's ``trusted_run`` (shared with
the §3.8 tests), for every config whose ``trusted_fits`` is True (small, one_gpu, tiny). The
official and trial configs' training state does not fit one process; their trusted run is
``trusted_fsdp.py``'s, which gives the same results in the same form.
"""

from harness.training_step import trusted_run  # noqa: F401  re-exported
