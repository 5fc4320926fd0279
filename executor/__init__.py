"""The executor: what runs beside the submission, in its process, for the tests.

Read by whoever wants to know how a grade keeps its verdicts out of reach of student code.
Two processes take part in every isolated test run (``pytest --isolate``, which the grader
always uses): the **harness** (pytest with the tests, their assertions, tolerances and fakes,
``harness/``), which never imports the submission, and the **executor** (``server.py``), which
imports the submission from its own copy, as an unprivileged user when the harness runs as root,
under resource limits, and runs what the harness asks.

They talk through two pipes, in the frames of ``wire.py``: call this adapter (or this method of
an object the executor holds) with these arguments; here is the result. Tensors cross as
copies; objects that cannot cross (a class, a model) stay where they are and cross as handles;
a function of the harness passed as an argument (a fake clock, a fake step) crosses as a
callback that runs back in the harness, so its record of what happened stays there. Here:
``probes/`` holds the kit's own code that must run next to the submission (compiling a Function,
counting forward passes); ``launches.py`` records which Triton kernels ran; ``replay_server.py``
runs only the submission's kernels for a replay. The harness copies this package into the
executor's folder (``harness/process.py``), beside the confinement modules it imports
(``confine``: its identity, frames and limits, shared with the leaderboard's worker), so it must
import nothing else of the kit: not ``harness``, ``tests``, nor the grader's or the leaderboard's
packages (a selftest of the kit checks).
"""
