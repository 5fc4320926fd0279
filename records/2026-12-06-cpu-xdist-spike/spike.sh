#!/usr/bin/env bash
# Issue 39's spike: the grader's hand-written chains against pytest-xdist's schedulers, on the same
# tests of the same submission, one after another, on a quiet machine. From the repo root:
#   PTO=/folder/holding/pytest_timeout.py bash records/2026-12-06-cpu-xdist-spike/spike.sh SUBMISSION [PROBLEM-K-EXPR]
# Prints one line per way: wall seconds, and pytest's or the grader's tally.
set -uo pipefail
submission=${1:?submission}
keyword=${2:-}
py=.venv/bin/python
out=$(mktemp -d)
chmod 755 "$out"
wall() { local s=$(date +%s.%N); "$@" > "$out/log" 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$s:.1f}')") s, exit $rc: $(grep -E '^grade: finished|passed|failed' "$out/log" | tail -1)"; }
k=(); [ -n "$keyword" ] && k=(-k "$keyword")
echo "grader chains (grade --same-user): $(wall $py -m autograder grade "$submission" --same-user --out "$out/grade" "${k[@]}")"
for dist in load worksteal; do
  echo "xdist -n 2 --dist $dist --isolate: $(wall env PYTHONPATH="${PTO:-}" $py -m pytest tests autograder/hidden_tests --submission "$submission" --isolate \
      -p no:cacheprovider -q -n 2 --dist $dist --max-worker-restart 8 ${PTO:+-p pytest_timeout --timeout 120} "${k[@]}")"
done
echo "plain pytest, one process, --isolate: $(wall env PYTHONPATH="${PTO:-}" $py -m pytest tests autograder/hidden_tests --submission "$submission" --isolate -p no:cacheprovider -q ${PTO:+-p pytest_timeout --timeout 120} "${k[@]}")"
rm -rf "$out"
