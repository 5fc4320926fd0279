#!/usr/bin/env bash
# The whole kit's suite on the 2-core machine with 4 busy processes spinning (issue 20's acceptance).
# CLONE: a fresh clone of the kit; OUT: where the logs go
cd "$CLONE"
for i in 1 2 3 4; do python3 -c 'while True: pass' & done
SPIN=$(jobs -p)
start=$(date +%s)
{ echo "commit $(git rev-parse HEAD)"; echo "start $(date -u)"; nproc; } > $OUT/meta.txt
bash setup.sh > $OUT/setup.log 2>&1; echo "setup rc $? at $(( $(date +%s) - start )) s" >> $OUT/meta.txt
.venv/bin/pytest -p no:cacheprovider --durations=30 -rfE > $OUT/pytest.log 2>&1; echo "pytest rc $? at $(( $(date +%s) - start )) s" >> $OUT/meta.txt
uptime >> $OUT/meta.txt
kill $SPIN
echo "end $(date -u)" >> $OUT/meta.txt
