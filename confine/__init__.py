"""The one confinement layer: how code from a submission is kept from everything but its answer.

Read by staff deciding whether a grade or a leaderboard time can be trusted, and by anyone
hardening either: a change here lands for both. Two kinds of process run student code, and both
are confined by these modules:

- the grader's executor (``executor/``, started by ``harness/process.py``), which runs the submission for the tests;
- the leaderboard's worker, which checks and times a FlashAttention-2 submission.

The modules every copy holds:

    identity.py   a network of its own (loopback only), then an unprivileged user for good
    views.py      what of its interpreter that user may read: views of closed directories on the way
    frames.py     the one length-prefixed frame reader and writer, with a size limit and deadline
    limits.py     resource limits it cannot raise again (CPU time, file size, processes, memory)
    environment.py  its environment, from scratch: the machine's GPU and compiler variables, its own folders
    children.py   ending a child's process group, and naming the signal it died of

Staff's copy also holds the pool that leases one user id per process (a lease ends with none of
its processes or files left), and the threat model that says, for each mechanism, what it
defends and which fixture proves it.

Standard library only: the executor and the worker import these before torch or the submission.

Students receive the modules the executor imports (``EXECUTOR_FILES``), since ``pytest
--isolate`` runs it on their machine.
"""

# What the executor needs of this package: copied into each executor's folder, and released.
EXECUTOR_FILES = ("__init__.py", "identity.py", "views.py", "frames.py", "limits.py", "environment.py", "children.py")
