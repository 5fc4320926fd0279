"""The schedule tool's quick estimate: a column of autograder/test_durations.toml from a grade's printout.

``python -m autograder.tools.time_test_files --from-grade-log LOG --write`` reads the "test time
per file" line every grade prints and writes one column in place; the other column, the flags
and the comments must survive, and a log without that line is refused with a message.
"""

from __future__ import annotations

import pytest

from autograder.schedule import load_durations
from autograder.tools.time_test_files import DURATIONS, from_grade_log, write_column

LOG = """grade: 10 test process chain(s), 8 at a time
grade: test time per file: autograder/hidden_tests/test_flash_backward_hidden.py 127.0 s; tests/test_torch_compile.py 4.2 s; tests/test_new_problem.py 0.5 s

total  74.56 / 77.00
"""

TABLE = '''# a comment that stays
[files]
"tests/test_torch_compile.py" = { cpu = 6.3, gpu = 90 }
"autograder/hidden_tests/test_flash_backward_hidden.py" = { cpu = 9.3, gpu = 143 }
"tests/test_pytorch_attention.py" = { cpu = 3.7, gpu = 8 }
'''


def test_the_per_file_line_becomes_seconds_with_each_chains_start_added():
    assert from_grade_log(LOG, 4.0) == [("autograder/hidden_tests/test_flash_backward_hidden.py", 131.0),
                                        ("tests/test_torch_compile.py", 8.2), ("tests/test_new_problem.py", 4.5)]


def test_writing_a_column_keeps_the_other_column_the_other_rows_and_the_comments():
    written = write_column(TABLE, "gpu", from_grade_log(LOG, 4.0))
    assert written.startswith("# a comment that stays\n[files]\n")
    assert '"tests/test_torch_compile.py" = { cpu = 6.3, gpu = 8.2 }' in written
    assert '"autograder/hidden_tests/test_flash_backward_hidden.py" = { cpu = 9.3, gpu = 131 }' in written
    assert '"tests/test_pytorch_attention.py" = { cpu = 3.7, gpu = 8 }' in written  # not in the log
    assert written.rstrip().endswith('"tests/test_new_problem.py" = { gpu = 4.5 }')  # a file without a line gets one


def test_a_column_a_line_lacks_is_added_to_it():
    written = write_column('"tests/test_a.py" = { gpu = 3 }\n', "cpu", [("tests/test_a.py", 2.5)])
    assert written == '"tests/test_a.py" = { cpu = 2.5, gpu = 3 }\n'


def test_the_kits_own_table_still_loads_after_a_rewrite(tmp_path):
    before = load_durations(DURATIONS)
    rewritten = tmp_path / "test_durations.toml"
    rewritten.write_text(write_column(DURATIONS.read_text(), "gpu", from_grade_log(LOG, 4.0)))
    after = load_durations(rewritten)
    compile_file = "tests/test_torch_compile.py"
    assert after[compile_file].gpu == 8.2 and after[compile_file].cpu == before[compile_file].cpu
    assert after["tests/test_new_problem.py"].gpu == 4.5
    assert {name: timing.cpu for name, timing in after.items() if name in before} == {
        name: timing.cpu for name, timing in before.items()}


def test_a_log_without_the_per_file_line_is_refused_with_what_to_pass():
    with pytest.raises(SystemExit, match="test time per file.*full grade"):
        from_grade_log("grade: finished in 3.0 s\n", 4.0)
