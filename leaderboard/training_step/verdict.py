"""Judge an official run: the correctness gate and the cheat detectors, all in the parent.

The rules are harness/training_step.py's ``judge``, shared with the §3.8 tests that students
run (the hidden ones apply one detector each); this module keeps the board's names.

Read by ``run.py``. Every fact judged here came back from the ranks as data (losses, full
parameters, the event log of collectives, call times); the truth (``trusted.py``) is computed
here. A refusal names each reason; a run is accepted only with none.

Detectors, each with a fixture in fixtures/training_step/:

- ``different_model``: the first step's loss is computed before any update, so it is the
  model's loss at its initial weights; it must equal the trusted model's (a submission that
  drops a layer, shrinks the vocabulary or swaps the loss changes it);
- ``no_update``: after the gate's steps the parameters must have moved from their initial
  values (an optimizer that does nothing leaves them where they were);
- ``no_communication``: each rank must call collectives during every step, and the ranks must
  end with the same parameters (ranks that each train on their own rows diverge);
- ``work_skipped_when_timed``: the timed calls must still train: each makes collectives as a
  gate step does, and the parameters after the timing differ from those after the gate (a step
  that returns a cached loss once the gate is over does neither);
- the gate itself: every step's loss (the mean of the ranks') and every parameter after the
  gate's steps match the trusted run within the config's tolerances.
"""

from harness.training_step import COLLECTIVE_EVENTS, collectives_per_step, judge  # noqa: F401
