#!/usr/bin/env bash
# Issue 42's first device run: every Gluon piece of benchmarks/gluon/minimal_kernel.py on an sm_90 GPU.
#   bash benchmarks/gluon/device_run.sh [PIECE ...]     # from the repo root; OUT=folder that comes back
# Writes one file, $OUT/summary.txt: the stack, then for each piece its PASS / FAIL / ERROR line and
# details, then the tally. Each piece runs in its own process under a time limit, so a warp-specialised
# kernel that deadlocks (a barrier phase wrong) or faults (which poisons the CUDA context) costs only its
# own line: "TIMEOUT" or the fault. About 2 minutes on an H200 with a cold Triton cache (estimate).
set -uo pipefail
out=${OUT:?set OUT to the folder whose files come back}
summary="$out/summary.txt"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
per_piece_s=${PER_PIECE_S:-120}

pieces=("$@")
if [ ${#pieces[@]} -eq 0 ]; then
    mapfile -t pieces < <(python3 -c 'import benchmarks.gluon.minimal_kernel as m; print("\n".join(p.name for p in m.PIECES))')
fi

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}")'
    git log -1 --format='commit %h %s' 2>/dev/null || true
    passed=0
    for piece in "${pieces[@]}"; do
        start=$SECONDS
        timeout --kill-after=10 "$per_piece_s" python3 -m benchmarks.gluon.minimal_kernel --only "$piece" > "$out/.piece.log" 2>&1
        rc=$?
        # keep the piece's verdict line and its details, not the device banner or the tally
        grep -v -e '^device: ' -e ' pieces PASS$' "$out/.piece.log"
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "TIMEOUT  $piece: no result after ${per_piece_s} s (a warp-specialised kernel waiting on a barrier that never completes?)"
        elif [ "$rc" -eq 0 ]; then
            passed=$((passed + 1))
        fi
        echo "    ($piece: exit $rc, $((SECONDS - start)) s)"
    done
    rm -f "$out/.piece.log"
    echo "$passed of ${#pieces[@]} pieces PASS"
} > "$summary" 2>&1
cat "$summary"
