#!/usr/bin/env bash
# Issue 42's backward device run: check each Gluon backward variant (benchmarks/gluon/backward.py) on an
# sm_90 GPU, then time the ones that pass beside the reference Function and SDPA cuDNN.
#   OUT=folder bash benchmarks/gluon/backward_run.sh [VARIANT ...]     # from the repo root
# Writes one file, $OUT/summary.txt: the stack; per variant its check lines (PASS / FAIL per case, or
# ERROR, or TIMEOUT: a deadlock, i.e. an mbarrier phase that never completes); then the leaderboard-shape
# agreement and timing tables. First a warm-up process compiles the reference's kernels for the check
# cases (WARM_S, default 120 s), so that each check, in its own process under PER_VARIANT_S (default
# 90 s), compiles only Gluon kernels; the timing process, with every variant that passed, runs under
# TIME_S (default 150 s) with ROUNDS interleaved rounds (default 3) and, unless PROFILE=0, a
# torch.profiler kernel table of one forward+backward per implementation (the forward / pre-pass /
# main kernel / cast split). Estimate (not measured): 4-6 minutes on an H100 with a cold Triton cache.
set -uo pipefail
out=${OUT:?set OUT to the folder whose files come back}
summary="$out/summary.txt"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
per_variant_s=${PER_VARIANT_S:-90}
time_s=${TIME_S:-150}
warm_s=${WARM_S:-120}
rounds=${ROUNDS:-3}
profile_flag=--profile
[ "${PROFILE:-1}" = "0" ] && profile_flag=

variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    mapfile -t variants < <(python3 -c 'import benchmarks.gluon.backward as b; print("\n".join(b.VARIANTS))')
fi

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    python3 -c 'import sys, torch, triton; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}")'
    git log -1 --format='commit %h %s' 2>/dev/null || true
    start=$SECONDS
    echo "== warm: the reference's Triton kernels for the check cases (Triton's disk cache)"
    timeout --kill-after=10 "$warm_s" python3 -m benchmarks.gluon.backward_check warm 2>&1 | tail -n 20
    echo "    (warm: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s)"
    passed=()
    for variant in "${variants[@]}"; do
        start=$SECONDS
        echo "== check $variant"
        timeout --kill-after=10 "$per_variant_s" python3 -m benchmarks.gluon.backward_check check "$variant" > "$out/.check.log" 2>&1
        rc=$?
        tail -n 60 "$out/.check.log"
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "TIMEOUT  $variant: no result after ${per_variant_s} s (a deadlock: an mbarrier phase never completes? or a slow compile)"
        elif [ "$rc" -eq 0 ]; then
            passed+=("$variant")
        fi
        echo "    ($variant: exit $rc, $((SECONDS - start)) s)"
    done
    rm -f "$out/.check.log"
    echo "== passed: ${passed[*]:-none}"
    start=$SECONDS
    echo "== time (${passed[*]:-no variant}) beside the reference and SDPA cuDNN"
    timeout --kill-after=10 "$time_s" python3 -m benchmarks.gluon.backward_check time "${passed[@]}" \
        --rounds "$rounds" $profile_flag 2>&1 | tail -n 250
    echo "    (time: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s)"
} > "$summary" 2>&1
cat "$summary"
