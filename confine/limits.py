"""Resource limits for a process that runs student code, set so that it cannot raise them again.

Read by staff choosing the limits, and called by the grader's executor and the leaderboard's
worker after they have dropped to their leased user (``identity``). Each limit is set as both
its soft and its hard value: an unprivileged process may lower a hard limit, never raise it.

    as_bytes      address space (RLIMIT_AS); CPU runners only: CUDA reserves far more than it uses
    cpu_s         CPU seconds (RLIMIT_CPU): SIGXCPU, then SIGKILL
    fsize_bytes   the largest file it may write (RLIMIT_FSIZE): SIGXFSZ
    nproc         processes and threads of its user (RLIMIT_NPROC): a fork bomb stops there; the
                  user is leased to this one process tree, so the count is its own
    core_bytes    core files (RLIMIT_CORE; ``identity.harden`` sets it to 0)

What each process gets is chosen by its caller: the grader passes its executor's limits on
the command line; the leaderboard's worker takes them from its own configuration.
"""

from __future__ import annotations

import resource

NAMES = {"as_bytes": resource.RLIMIT_AS, "cpu_s": resource.RLIMIT_CPU, "fsize_bytes": resource.RLIMIT_FSIZE,
         "nproc": resource.RLIMIT_NPROC, "core_bytes": resource.RLIMIT_CORE}


def apply(limits: dict[str, int | None]) -> None:
    """Set each given limit (None leaves one unset) as both soft and hard; an unknown name is a
    ValueError that lists the known ones."""
    unknown = sorted(set(limits) - set(NAMES))
    if unknown:
        raise ValueError(f"unknown resource limits {unknown}; known: {sorted(NAMES)}")
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(NAMES[name], (int(value), int(value)))
