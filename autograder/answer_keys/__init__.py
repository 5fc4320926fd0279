"""Staff's answer keys for the written problems, and checkers to run on a writeup's numbers.

Staff only (the release and the Gradescope bundle leave ``autograder/`` out). The grader never
reads a writeup; a TA copies a student's numbers into a small file and runs a key's checker on it:

    .venv/bin/python -m autograder.answer_keys.parallelism_2026 template > answers.toml
    .venv/bin/python -m autograder.answer_keys.parallelism_2026 check answers.toml

One module a set of problems: ``parallelism_2026`` holds the 2026 edition's W7 to W11.
"""
