"""The FlashAttention-2 leaderboard: the official timing, a correctness gate, cheat detection
and a results table.

Staff read this package; students only see its results. ``python -m leaderboard --help`` lists
the commands, and ``leaderboard/README.md`` explains each check and every number it reports.

Module map (one concept per file):

* ``config``      the timed problem, its FLOP count, timing settings and every threshold
* ``timing``      the official timing loop (``torch.compile(Fn.apply)`` + ``triton.testing.do_bench``),
                  run in the worker
* ``gate``        the float32 reference and the correctness comparison
* ``timer_guard`` run in the worker: timers captured before the submission is imported, and the
                  check that nothing patched them
* ``kernels``     profiler-based checks: library attention, the submission's own Triton kernels
* ``detectors``   the remaining cheat checks, each a small function that raises ``Refusal``
* ``worker``      runs one submission in its own process: every check, then the timing
* ``machine``     what a record was measured on: the GPU and the software versions
* ``confine``     the worker's first act: drop to the sandbox uid, no new privileges
* ``worker_setup`` the parent's side of isolation: uid leases, the sandbox directory, the environment
* ``protocol``    the pipe from the worker to the parent: framed JSON and raw tensor bytes
* ``verdict``     the parent's judgement of what the worker reports, from evidence it checks
* ``parent``      the trusted parent: snapshots the submission, runs the worker, stores a record
* ``store``       the results store (JSON lines)
* ``table``       the ranking as Markdown and as a PNG bar chart
* ``selftest``    the acceptance run: the reference, the honest slow fixture, every cheat

The submissions that test it are the kit's ``fixtures/leaderboard`` and ``fixtures/training_step``.
"""
