"""What each rank of a training-step run does: the kit's rank job, shared with the §3.8 tests.

The job itself (build the kit's model and this rank's rows, hand them to the submission's
``get_training_step``, run the gate's steps, then time the step) lives in
executor/probes/training_step.py, so that the board and the students' tests run the very
same code; see its docstring. This module keeps the board's old names.
"""

from executor.probes.training_step import (  # noqa: F401  re-exported
    KIT, build_model, global_batch, kit_model_module, run_rank)
