#!/usr/bin/env bash
# One device call: unpack TREE (a `git archive` of the commit under test), then run each of STEPS:
#   a:  the mixed class's first half in one full-assignment batch (the reference, the correct copy,
#       the three backward one-bug copies, the stubs, the corrupt zip)
#   b:  its second half (the three forward one-bug copies, the two autotuning submissions, the cheat)
#   lb: the leaderboard's official time for the reference at TREE and at BASE, alternating, 2 each
#   att: gpu_checks/attacks_gpu.py on the attacks the replay fixes touch
#   ddp: the one-GPU NCCL DDP tests (issue 43) on the reference, and each buffer-device mutant
#   grade: the reference's full grade on this GPU (points and wall time)
# summary.txt is written as it goes, so a call cut by its limit still returns what it did.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/summary.txt") 2>&1
HERE=$PWD
mkdir -p /tmp/tree && tar xf "$HERE/${TREE:?}" -C /tmp/tree || exit 1
date -u +"%Y-%m-%dT%H:%M:%SZ"; echo "tree: $(basename "$TREE" .tar); steps: ${STEPS:?}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")'
# CS336's own cs336_systems/__init__.py reads this package metadata, which setup.sh's install provides.
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$site/cs336_systems-0.1.0.dist-info" && printf 'Metadata-Version: 2.1\nName: cs336-systems\nVersion: 0.1.0\n' > "$site/cs336_systems-0.1.0.dist-info/METADATA"
cd /tmp/tree
for step in $STEPS; do
  s=$SECONDS
  case $step in
    a) timeout 560 python3 gpu_checks/mixed_class.py /tmp/class-a --batch --problems "" \
         --only reference,correct_base,backward_scale_one_over_d,backward_dO_treated_as_ones,delta_from_dO_only,stubs,zip_bad_crc
       echo "step a exit $? after $((SECONDS-s)) s"; tail -8 /tmp/class-a/batch.log; cp /tmp/class-a/summary.md "$OUT/class-a.md" ;;
    b) timeout 560 python3 gpu_checks/mixed_class.py /tmp/class-b --batch --problems "" --real "$HERE/results/device/real" \
         --only scale_applied_twice,causal_bottom_right,no_key_bound_mask,autotuned_triton,real_NiccoloSacchi,triton_is_pytorch
       echo "step b exit $? after $((SECONDS-s)) s"; tail -8 /tmp/class-b/batch.log; cp /tmp/class-b/summary.md "$OUT/class-b.md" ;;
    lb) mkdir -p /tmp/base && tar xf "$HERE/${BASE:?}" -C /tmp/base
        for round in 1 2; do for t in tree base; do
          (cd /tmp/$t && timeout 150 python3 -m leaderboard run reference --name "reference ($t)" 2>&1 | tail -4 | sed "s/^/$t $round: /")
        done; done
        echo "step lb after $((SECONDS-s)) s" ;;
    ddp) tests="autograder/hidden_tests/test_ddp_flat_hidden.py::test_ddp_flat_on_one_gpu_with_nccl autograder/hidden_tests/test_ddp_bucketed_hidden.py::test_ddp_bucketed_on_one_gpu_with_nccl"
         python3 -c "from pathlib import Path; from fixtures import materialize; from fixtures.mutants import get; [materialize(get(n), Path('/tmp/mut')/n) for n in ('flat_buffer_on_default_device','bucket_buffer_on_default_device')]"
         for sub in reference /tmp/mut/flat_buffer_on_default_device /tmp/mut/bucket_buffer_on_default_device; do
           echo "-- $sub"; timeout 150 python3 -m pytest -p no:cacheprovider -q -rs --submission $sub $tests 2>&1 | grep -E "passed|failed|Error|No backend" | tail -6
         done
         echo "step ddp after $((SECONDS-s)) s" ;;
    grade) timeout 200 python3 -m autograder grade reference --require-gpu --out /tmp/gref > /tmp/gref.log 2>&1
           echo "step grade exit $? after $((SECONDS-s)) s"; tail -3 /tmp/gref.log
           python3 -c "import json; t=json.load(open('/tmp/gref/results.json'))['tests']; print('points', round(sum(x['score'] for x in t), 4), '/', round(sum(x.get('max_score', 0) for x in t), 4), 'not passed:', [x['name'] for x in t if x.get('status') != 'passed'][:8])" ;;
    att) timeout ${ATTACK_S:-200} python3 gpu_checks/attacks_gpu.py /tmp/attacks triton_backward_pytorch
         echo "step att exit $? after $((SECONDS-s)) s" ;;
  esac
done
date -u
