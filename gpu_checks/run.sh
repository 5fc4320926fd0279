#!/usr/bin/env bash
# The GPU acceptance checks, run on an H200 from the repo root:
#   bash gpu_checks/run.sh LOGDIR [tests|grade|tolerances|tolerances-bf16|benchmark|tune|mutants|race|leaderboard|attacks|parallel ...]
# `attacks` grades the attacks only a GPU can judge (gpu_checks/attacks_gpu.py); `parallel` runs the
# part-2 GPU tests (NCCL, two GPUs: use the two-GPU machine); `parallel-bench` (two GPUs, under 4 min) the
# all-reduce table (NCCL, 1 MB-1 GB, all_reduce.png) and the DDP/FSDP step-time table (parallel_training.md); `batch` grades a fake Gradescope export
# with one GPU and with two (gpu_checks/batch_throughput.py; BATCH_PROBLEMS to choose, BATCH_GPUS=1 on one GPU).
# Two GPUs also: `parallel-profile` (gpu_checks/parallel_profile.py: DDP overlap in the profiler's
# timeline, FSDP memory, for the reference and the mutants those tests catch) and `parallel-mutants`
# (every part-2 mutant, its NCCL tests included). `fairness` grades the fairness fixtures
# (fixtures/fairness) on the GPU; `fp16-mutants` runs the 16-bit accumulator mutants; `mixed-class` grades
# a realistic class one submission at a time (gpu_checks/mixed_class.py: seconds and points each, to summary.md).
# With no step names it runs grade, race, benchmark and leaderboard (about 9 minutes on an H200:
# grade 1.8, race 0.3, benchmark 2.7, leaderboard 3.8, measured 2026-11-29). `tests` repeats what `grade`
# runs; `tolerances` (all dtypes, three submissions) takes far longer on a GPU, where each random
# case compiles new kernels: prefer `tolerances-bf16` (83 s on the H200). Each step's console output
# goes to LOGDIR/<step>.log; with PACK=FILE.tgz set, LOGDIR is also packed into FILE after each
# step (the leaderboard self-test's records, summary and table to LOGDIR/leaderboard/). The records
# of past runs are in records/<date>-<machine>-<topic>/: copy a run's LOGDIR there to keep it.
set -uo pipefail
logdir=${1:?usage: bash gpu_checks/run.sh LOGDIR [steps...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(grade race benchmark leaderboard)
mkdir -p "$logdir"
export PYTHONUNBUFFERED=1
# NCCL multicast (NVLS, symmetric memory, NVSHMEM) off in every process: the ranks inherit these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch, triton, numpy; print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, numpy {numpy.__version__}")'
} | tee "$logdir/stack.log"

run_step() {
    local name=$1; shift
    echo "=== $name: $*"
    local start=$SECONDS
    "$@" 2>&1 | tee "$logdir/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$logdir/$name.log"
    [ "$rc" -eq 0 ] || status=1
    # Pack the logs after every step, so a run stopped at its time limit still returns them.
    if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$logdir" .; fi
}

for step in "${steps[@]}"; do
    case $step in
        tests) run_step tests python3 -m pytest tests autograder/hidden_tests --submission reference \
                   -m gpu -p no:cacheprovider -q --durations=15 ;;
        grade) run_step grade python3 -m autograder grade reference --require-gpu --expect-full \
                   --out "$logdir/grade" ;;
        tolerances) run_step tolerances python3 -m autograder.tools.measure_tolerances \
                   --submission reference --submission emulated \
                   --submission fixtures/mutants/base --cases 100 ;;
        benchmark) run_step benchmark python3 benchmarks/flash_attention_benchmark.py --quick \
                   --out "$logdir/benchmark" ;;
        tolerances-bf16) run_step tolerances-bf16 python3 -m autograder.tools.measure_tolerances \
                   --submission reference --functions triton --dtypes bfloat16 --cases 30 ;;
        tune) run_step tune python3 benchmarks/tune_flash_attention.py --out "$logdir/tune" ;;
        race) CS336_MUTANTS=dq_race_no_atomic run_step race python3 -m pytest autograder/selftests/test_mutant_catalog.py \
                   -p no:cacheprovider -q -rs ;;
        mutants) run_step mutants python3 -m pytest autograder/selftests/test_mutant_catalog.py \
                   -p no:cacheprovider -q --durations=10 ;;
        leaderboard) run_step leaderboard python3 -m leaderboard selftest --out "$logdir/leaderboard" ;;
        attacks) run_step attacks python3 gpu_checks/attacks_gpu.py "$logdir/attacks" ;;
        batch) run_step batch python3 gpu_checks/batch_throughput.py "$logdir/batch" "${BATCH_PROBLEMS:-flash_forward_pytorch,nsys_profile}" "${BATCH_GPUS:-1,2}" ;;
        parallel) run_step parallel python3 -m pytest tests autograder/hidden_tests -m gpu --submission reference \
                   --isolate -p no:cacheprovider -q -k "ddp or fsdp or sharded or distributed_communication" ;;
        parallel-bench)  # two GPUs; about 1-2 min: all-reduce over NCCL 1 MB-1 GB, then each part-2 wrapper on the small LM
            run_step parallel-bench-all-reduce timeout -k 5 100 bash -c "cd reference && exec python3 -m \
                   cs336_systems.distributed_communication --backend nccl --world-sizes 2 --sizes-mb 1 10 100 1000 \
                   --warmup-steps 5 --measure-steps 10 --plot '$(realpath "$logdir")/all_reduce.png'"
            run_step parallel-bench-training timeout -k 5 130 python3 benchmarks/parallel_training_benchmark.py \
                   --model-size small --context-length 128 --batch-size 4 --world-size 2 --timeout-s 120 \
                   --out "$logdir/parallel_training.md" ;;
        parallel-profile) run_step parallel-profile timeout -k 5 300 python3 gpu_checks/parallel_profile.py \
                   "$logdir/parallel_profile.md" ;;
        parallel-mutants) run_step parallel-mutants python3 -m pytest autograder/selftests/test_distributed_mutants.py \
                   -p no:cacheprovider -q -rs ;;
        mixed-class) run_step mixed-class python3 gpu_checks/mixed_class.py "$logdir/mixed_class" ;;
        fairness) run_step fairness python3 -m pytest autograder/selftests/test_grader_fairness.py \
                   -p no:cacheprovider -q -rs --durations=10 ;;
        fp16-mutants) CS336_MUTANTS=accumulator_float16_pytorch,running_stats_float16_pytorch,accumulator_float16_triton,running_sum_float16_triton \
                   run_step fp16-mutants python3 -m pytest autograder/selftests/test_mutant_catalog.py -p no:cacheprovider -q -rs ;;
        *) echo "unknown step $step (valid: tests grade tolerances tolerances-bf16 benchmark tune mutants race leaderboard attacks batch parallel parallel-bench parallel-profile parallel-mutants mixed-class fairness fp16-mutants)"; exit 2 ;;
    esac
done
exit $status
