"""The training-step leaderboard (CS336 2026, handout §9): the fastest full training step on two GPUs.

Staff only. A second board next to the FlashAttention-2 one (leaderboard/). One step is the
forward, the cross-entropy loss, the backward and the AdamW update of the provided Transformer
LM, on two ranks. Each rank's code (``rank.py``) builds the model and the data, hands the model
to the submission's ``adapters.get_training_step``, runs a few steps for the correctness gate,
then times the step itself; the verdicts (``verdict.py``) are made in the parent process
against a trusted single-process run (``trusted.py``), or, where the training state does not fit
one process (the official 8B config), a trusted FSDP2 run on the same ranks' launcher
(``trusted_fsdp.py``). See README.md, "The training-step board".

    python -m leaderboard.training_step run path/to/submission --cpu   # CPU, gloo, tiny config
"""
