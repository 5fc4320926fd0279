#!/usr/bin/env bash
# One call that must do what matters most, for a session that may get only one machine:
# the reference's full grade at TREE and at BASE (499741a), the correct copy and the rest of the
# class (FlashAttention problems), the GPU attacks most tied to the backward's replay.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/summary.txt") 2>&1
mkdir -p /tmp/tree /tmp/base && tar xf "$PWD/${TREE:?}" -C /tmp/tree && tar xf "$PWD/${BASE:?}" -C /tmp/base || exit 1
date -u +"%Y-%m-%dT%H:%M:%SZ"; echo "tree: $(basename "$TREE" .tar), base: $(basename "$BASE" .tar)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")'
points() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['tests']; print('   points', round(sum(x['score'] for x in t),2), '/', round(sum(x.get('max_score',0) for x in t if x.get('status')!='not_graded'),2), 'failed', [x['name'][-90:] for x in t if x.get('status')=='failed'][:6])" "$1"; }
grade() { s=$SECONDS; (cd /tmp/$1 && python3 -m autograder grade reference --require-gpu --out /tmp/out-$1-$2 --timeline /tmp/tl-$1-$2.jsonl > /tmp/log-$1-$2 2>&1); echo "grade $2 $1: exit $? wall $((SECONDS-s)) s"; points /tmp/out-$1-$2/results.json; }
# Most important first: a cut call still returns what it did (summary.txt is written as it goes).
cd /tmp/tree
s=$SECONDS
timeout 60 python3 gpu_checks/mixed_class.py /tmp/class1 --only correct_base > /tmp/class1.log 2>&1
echo "correct_base exit $? after $((SECONDS-s)) s"; tail -3 /tmp/class1/summary.md
python3 - <<'PY2'
import json
r = json.load(open("/tmp/class1/correct_base/results.json"))
for t in r["tests"]:
    if t.get("status") == "failed":
        print("FAILED", t["name"][-110:], t["score"], "/", t.get("max_score"))
        print("   ", (t.get("output") or "")[:400].replace("\n", " | "))
PY2
grade tree 1
s=$SECONDS
timeout ${ATTACK_S:-120} python3 gpu_checks/attacks_gpu.py /tmp/attacks triton_backward_pytorch triton_sentinel forged_launch_log
echo "attacks exit $? after $((SECONDS-s)) s"
grade base 1
(cd /tmp/tree && python3 -m autograder.tools.grade_timeline /tmp/tl-tree-1.jsonl 2>&1 | head -20)
cd /tmp/tree
s=$SECONDS
timeout 200 python3 gpu_checks/mixed_class.py /tmp/class --only causal_bottom_right,no_key_bound_mask,scale_applied_twice,triton_is_pytorch,stubs,zip_bad_crc > /tmp/class.log 2>&1
echo "mixed_class exit $? after $((SECONDS-s)) s"; cat /tmp/class/summary.md
date -u
