"""Grading a whole class: ``python -m autograder batch EXPORT --out DIR`` (and the leaderboard's batch).

Read by staff who grade the GPU half after the deadline. The pieces, one a file:

- ``export.py``: read a Gradescope "Export Submissions" folder or zip (``submission_metadata.yml``
  and one folder a submission) into submissions and their students;
- ``executors.py``: run one command per submission, each in its own process: on this machine (one
  at a time per GPU, with ``CUDA_VISIBLE_DEVICES`` set, or ``--jobs`` at a time on a CPU), or as
  a Slurm job array through ``submitit`` (one GPU a job); progress lines and the slowest job;
- ``driver.py``: the one batch driver, which this batch and the leaderboard's both run: the job
  list, where it runs (``--cluster``), resumption (same version hash and key: skipped), one
  retry, each job's ``batch.json``, and the one ``summary.md`` writer;
- ``grading.py``: the batch grade: a ``python -m autograder grade`` job per submission, its
  ``results.json`` and log, and the class report;
- ``report.py``: the class CSV for Gradescope's score upload and the per-problem histograms.
The Slurm path is tested for real on a one-node Slurm on this machine, ``autograder/selftests/local_slurm.py``
(root, Debian's slurm-wlm, which ``autograder/selftests/install_slurm.sh`` installs from setup.sh).
"""
