set -u
S=$OUT/summary.txt
export CS336_REPLAY_LOG=$OUT/replay.jsonl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $S
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)' >> $S
s=$SECONDS; python3 -m autograder grade reference --require-gpu --timeline $OUT/timeline.jsonl --out /tmp/ref > /tmp/grade.log 2>&1
echo "== grade rc=$? $((SECONDS-s)) s" >> $S; grep -E "^§|^total|points need|Slowest|^  test|^  a hidden|finished" /tmp/grade.log >> $S
unset CS336_REPLAY_LOG
mkdir -p /root/lb && python3 -m fixtures leaderboard cheat_cudnn_sentinel /root/lb/cudnn > /dev/null 2>&1; python3 -m fixtures leaderboard honest_slow /root/lb/slow > /dev/null 2>&1
s=$SECONDS; timeout 280 python3 -m leaderboard run reference --name ref --store /root/lb/r.jsonl > /tmp/lb1.log 2>&1; echo "== lb ref rc=$? $((SECONDS-s)) s" >> $S; grep -vE "^\s+\|" /tmp/lb1.log | tail -8 >> $S
for f in cudnn slow; do s=$SECONDS; timeout 150 python3 -m leaderboard run /root/lb/$f --quick --name $f --store /root/lb/r.jsonl > /tmp/lb-$f.log 2>&1; echo "== lb $f rc=$? $((SECONDS-s)) s" >> $S; grep -vE "^\s+\|" /tmp/lb-$f.log | tail -6 >> $S; done
python3 -c "
import json
for l in open('/root/lb/r.jsonl'):
    r=json.loads(l); print(r['name'], r['accepted'], r.get('time_ms'), r.get('kernels_ms'), r.get('kernels_timed'), [x['code'] for x in r['refusals']])" >> $S
