#!/usr/bin/env bash
# Call 2: the reference's full grade, a committed snapshot (TREE) against 499741a (BASE), side by side,
# alternating; then the GPU attacks call 1 left.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/summary.txt") 2>&1
mkdir -p /tmp/tree /tmp/base && tar xf "$PWD/${TREE:?}" -C /tmp/tree && tar xf "$PWD/${BASE:?}" -C /tmp/base || exit 1
date -u +"%Y-%m-%dT%H:%M:%SZ"; echo "tree: $(basename "$TREE" .tar), base: $(basename "$BASE" .tar)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")'
points() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['tests']; print('   points', round(sum(x['score'] for x in t),2), '/', round(sum(x.get('max_score',0) for x in t if x.get('status')!='not_graded'),2), 'failed', [x['name'][-90:] for x in t if x.get('status')=='failed'][:5])" "$1"; }
grade() { s=$SECONDS; (cd /tmp/$1 && python3 -m autograder grade reference --require-gpu --out /tmp/out-$1-$2 --timeline /tmp/tl-$1-$2.jsonl > /tmp/log-$1-$2 2>&1); echo "grade $2 $1: exit $? wall $((SECONDS-s)) s"; points /tmp/out-$1-$2/results.json; }
grade tree 1; grade base 1; grade tree 2; grade base 2; grade tree 3
for g in tree-1 base-1; do echo "== where $g went"; (cd /tmp/tree && python3 -m autograder.tools.grade_timeline /tmp/tl-$g.jsonl 2>&1 | head -22); done
python3 - <<'PY2'
import json, collections
def per_file(path):
    ev = [json.loads(l) for l in open(path)]; st = {}; out = collections.Counter()
    for e in ev:
        k = (e.get("chain"), e.get("nodeid"))
        if e["event"] == "start": st[k] = e["t"]
        if e["event"] == "end" and k in st: out[e["nodeid"].split("::")[0].split("/")[-1]] += e["t"] - st[k]
    return out
a, b = per_file("/tmp/tl-tree-1.jsonl"), per_file("/tmp/tl-base-1.jsonl")
print("test seconds summed: tree", round(sum(a.values()), 1), "base", round(sum(b.values()), 1))
for f in sorted(set(a) | set(b), key=lambda f: -(a.get(f, 0) - b.get(f, 0)))[:10]:
    print(f"  {a.get(f, 0):7.1f} {b.get(f, 0):7.1f} {a.get(f, 0) - b.get(f, 0):+7.1f} {f}")
PY2
cd /tmp/tree
s=$SECONDS
timeout ${ATTACK_S:-200} python3 gpu_checks/attacks_gpu.py /tmp/attacks ${ATTACKS:-triton_do_nothing_kernel triton_is_pytorch forged_probe cheat_flex_attention}
echo "attacks exit $? after $((SECONDS-s)) s"
date -u
