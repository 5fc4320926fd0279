#!/usr/bin/env bash
# Call 1: reference grade now vs 499741a side by side; training step one GPU; the 3 attacks left.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=$OUT/summary.txt
exec > >(tee "$S") 2>&1
date -u +"%Y-%m-%dT%H:%M:%SZ"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")'
mkdir -p /tmp/base && tar xf results/device/base-499741a.tar -C /tmp/base
points() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['tests']; print('points', round(sum(x['score'] for x in t),2), '/', round(sum(x.get('max_score',0) for x in t),2), 'failed', [x['name'] for x in t if x.get('status')!='passed'][:5])" "$1"; }
echo "=== gluon pieces (benchmarks/gluon/device_run.sh, 40 s a piece)"
mkdir -p /tmp/gluon; s=$SECONDS; OUT=/tmp/gluon PER_PIECE_S=40 timeout 160 bash benchmarks/gluon/device_run.sh > /dev/null 2>&1; echo "gluon exit $? after $((SECONDS-s)) s"; cp /tmp/gluon/summary.txt $OUT/gluon-summary.txt; cat /tmp/gluon/summary.txt
now() { s=$SECONDS; python3 -m autograder grade reference --require-gpu --out /tmp/now$1 > /tmp/now$1.log 2>&1; echo "grade $1 now (HEAD): exit $? wall $((SECONDS-s)) s"; points /tmp/now$1/results.json; }
base() { s=$SECONDS; (cd /tmp/base && python3 -m autograder grade reference --require-gpu --out /tmp/base$1 > /tmp/base$1.log 2>&1); echo "grade $1 base (499741a): exit $? wall $((SECONDS-s)) s"; points /tmp/base$1/results.json; }
now 1; base 1; now 2
s=$SECONDS; timeout 120 python3 -m leaderboard.training_step run reference --one-gpu --name staff-1gpu --store $OUT/training_step_one_gpu.jsonl; echo "training_step exit $? after $((SECONDS-s)) s"
tail -5 /tmp/now1.log
cp /tmp/now1/results.json $OUT/results-now.json 2>/dev/null
s=$SECONDS; timeout 200 python3 gpu_checks/attacks_gpu.py /tmp/attacks triton_backward_pytorch autotune_tally cheat_flex_attention; echo "attacks exit $? after $((SECONDS-s)) s"
date -u
