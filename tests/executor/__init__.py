"""The executor: a separate process that imports the submission and runs it for the tests.

Read by whoever wants to know how a grade keeps its verdicts out of reach of student code.
Two processes take part in every isolated test run (``pytest --isolate``, which the grader
always uses):

- the **harness** is pytest with the test modules, their assertions, tolerances and fakes; it
  never imports the submission;
- the **executor** (``server.py``) imports the submission from its own copy, as an unprivileged
  user when the harness runs as root, under resource limits, and runs what the harness asks.

They talk through two pipes, in the frames of ``wire.py``: call this adapter (or this method of
an object the executor holds) with these arguments; here is the result. Tensors cross as
copies; objects that cannot cross (a class, a model) stay where they are and cross as handles;
a function of the harness passed as an argument (a fake clock, a fake step) crosses as a
callback that runs back in the harness, so its record of what happened stays there. The
harness's side is ``process.py`` (start, stop, confine the process), ``client.py`` (requests and
replies), ``proxies.py`` (what a test holds of the submission) and ``autograd_bridge.py`` (a
stand-in graph for each returned tensor); ``probes/`` holds the kit's own code that must run next
to the submission (compiling a Function, counting forward passes); ``launches.py`` records which
Triton kernels ran. This package is copied into the executor's folder, beside a copy of the
confinement modules it imports (``confine``: its identity, frames and limits, shared with the
leaderboard's worker), so it must import nothing else from the rest of the kit.
"""
