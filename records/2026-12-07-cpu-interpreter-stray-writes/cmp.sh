#!/bin/bash
# usage: cmp.sh KITDIR SUB OUT
cd "$1" && TRITON_INTERPRET=1 timeout 1500 /work/main/.venv/bin/python -m pytest -p no:cacheprovider -p no:xdist -q -rA --submission "$2" --isolate tests/test_flash_forward_triton.py tests/test_flash_backward.py autograder/hidden_tests/test_flash_forward_triton_hidden.py autograder/hidden_tests/test_flash_backward_hidden.py > "$3" 2>&1
