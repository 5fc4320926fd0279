"""The harness: the trusted side of a test run, which judges the submission and never imports it.

Read by the visible and hidden tests, the grader and the leaderboard's parent. ``client.py``,
``process.py``, ``proxies.py``, ``autograd_bridge.py`` and ``replay.py`` run the submission in an
executor (``executor/``) and judge what comes back; ``submission.py`` says what a submission is;
``flash_reference.py``, ``flash_tolerances.py``, ``assertions.py`` and the other checks are the
truths the tests and the leaderboard share; the rest is how the tests run (GPU markers, seeds).
"""
