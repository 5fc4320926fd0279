#!/usr/bin/env bash
# Call 1: the correct copy and the rest of issue 39's class after the two replay fixes (3d3ebd8),
# each failed test of the correct copy printed; then the GPU attacks most tied to the backward's replay.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/summary.txt") 2>&1
# The tree graded is a committed snapshot (TREE=results/device/<commit>.tar, from git archive), not the working tree.
mkdir -p /tmp/tree && tar xf "$PWD/${TREE:?}" -C /tmp/tree && cd /tmp/tree || exit 1
date -u +"%Y-%m-%dT%H:%M:%SZ"; echo "tree: $(basename "$TREE" .tar)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")'
s=$SECONDS
timeout 300 python3 gpu_checks/mixed_class.py /tmp/class --only correct_base,scale_applied_twice,causal_bottom_right,no_key_bound_mask,triton_is_pytorch,stubs,zip_bad_crc > /tmp/class.log 2>&1
echo "mixed_class exit $? after $((SECONDS-s)) s"
cat /tmp/class/summary.md
python3 - <<'PY'
import json
r = json.load(open("/tmp/class/correct_base/results.json"))
for t in r["tests"]:
    if t.get("status") != "passed":
        print("FAILED", t["name"], t["score"], "/", t.get("max_score"))
        print("   ", (t.get("output") or "")[:600].replace("\n", " | "))
PY
s=$SECONDS
timeout 260 python3 gpu_checks/attacks_gpu.py /tmp/attacks triton_backward_pytorch triton_sentinel triton_numpy_recognises_rerun forged_launch_log autotune_tally
echo "attacks exit $? after $((SECONDS-s)) s"
date -u
