#!/bin/bash
# What needs a GPU, run on a machine that has one (the suite's machines have none).
#
# usage: tests/gpu_checks.sh [BUILD] [OUTDIR]
#   BUILD   a build tree with the CUDA backend (default: build-test)
#   OUTDIR  where the logs go (default: gpu-checks.out)
#
# 1. every Check test binary of BUILD (the CUDA comparisons first, alone): psworker's default device
#    is cuda:0 when CUDA is built in, so each training test trains on the GPU; the
#    CUDA comparisons in kernels, kernels_conv, kernels_layers and gradcheck_layers
#    must run (a "no CUDA device" skip there is a failure here);
# 2. the main job on the GPU (psctl local --gpus all), mirrored over NCCL, and one
#    epoch of the MLP and the example CNN alone on cuda:0 beside the same on the CPU.
# Data: PS_DATA_DIR or /usr/share/datasets/fashion-mnist. Prints "N passed, N failed".
set -u
BUILD=${1:-build-test}
OUT=${2:-gpu-checks.out}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$BUILD" && pwd) || { echo "gpu_checks: no build tree $1" >&2; exit 2; }
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
export PSD=$BUILD/ps-server/psd PSWORKER=$BUILD/worker/psworker PSCTL=$BUILD/psctl/psctl
export PS_SOURCE_ROOT=$ROOT CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} PS_SANITIZED=0
DATA=${PS_DATA_DIR:-/usr/share/datasets/fashion-mnist}
JOBS=${GPU_CHECK_JOBS:-8}

command -v nvidia-smi >/dev/null && nvidia-smi -L
passed=0 failed=0
: >"$OUT/summary.txt"; : >"$OUT/tests.txt"
note() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }

# 1. the Check tests (the deploy/ scripts and Python tests are not GPU paths): the
# four with CUDA comparisons first, alone, then the others beside each other
run_one() { # name -> "PASS name secs" or "FAIL(rc=N) name secs"
    local t=$1 log=$OUT/logs/$1.log s=$SECONDS rc
    timeout -k 10 "$LIMIT" "$BUILD/tests/$t" >"$log" 2>&1
    rc=$?
    case $t in
    test_kernels | test_kernels_conv | test_kernels_layers | test_gradcheck_layers)
        grep -q "no CUDA device" "$log" && { echo "CUDA comparisons skipped" >>"$log"; rc=99; } ;;
    esac
    echo "$([ $rc -eq 0 ] && echo PASS || echo "FAIL(rc=$rc)") $t $((SECONDS - s))s"
}
export -f run_one
export BUILD OUT LIMIT=${GPU_CHECK_LIMIT:-600}
gpu_tests="test_kernels test_kernels_conv test_kernels_layers test_gradcheck_layers"
for t in $gpu_tests; do run_one $t | tee -a "$OUT/summary.txt" "$OUT/tests.txt"; done

# 2. jobs on the GPU, then the other tests
job() { # name, expected text, command...; WANT_RC=N job ...: it must exit N (default 0)
    local name=$1 want=$2 s=$SECONDS
    shift 2
    timeout -k 10 300 "$@" >"$OUT/logs/job_$name.log" 2>&1
    local rc=$?
    if [ $rc -eq "${WANT_RC:-0}" ] && grep -q -- "$want" "$OUT/logs/job_$name.log"; then
        passed=$((passed + 1))
        note "PASS job_$name $((SECONDS - s))s: $(grep -h 'test accuracy' "$OUT/logs/job_$name.log" | tail -1)"
    else
        failed=$((failed + 1))
        note "FAIL(rc=$rc) job_$name $((SECONDS - s))s"
    fi
}
job main_gpu "job finished" "$PSCTL" local --ps 2 --gpus all --mode sync --epochs 2 --data "$DATA"
job mirrored_nccl "job finished" "$PSCTL" local --strategy mirrored --communication nccl \
    --gpus all --epochs 1 --data "$DATA"
# two workers on one GPU: auto keeps the ring; an explicit nccl is refused, named
# (psworker exits 2, psctl 1)
job shared_gpu_auto "communication ring: workers 0 and 1 compute on one GPU" \
    "$PSCTL" local --strategy mirrored --workers 2 --epochs 1 --data "$DATA" -- --device cuda:0
WANT_RC=1 job shared_gpu_nccl "workers 0 and 1 compute on one GPU, and NCCL needs a GPU per worker" \
    "$PSCTL" local --strategy mirrored --communication nccl --workers 2 \
    --epochs 1 --data "$DATA" -- --device cuda:0
# GPU_CHECK_CPU=0: no CPU baseline beside the GPU runs
for dev in cuda:0 $([ "${GPU_CHECK_CPU:-1}" = 1 ] && echo cpu); do
    job "mlp_${dev%%:*}" "test accuracy" "$PSWORKER" --no-ps yes --device "$dev" --epochs 1 \
        --data "$DATA" --model "$ROOT/examples/mlp.json"
    job "cnn_${dev%%:*}" "test accuracy" "$PSWORKER" --no-ps yes --device "$dev" --epochs 1 \
        --data "$DATA" --model "$ROOT/examples/fashion_cnn.json"
done
# GPU_CHECK_TESTS="test_a test_b": only those (a rerun of what failed)
{ [ -n "${GPU_CHECK_TESTS:-}" ] && tr ' ' '\n' <<<"$GPU_CHECK_TESTS" || ls "$BUILD/tests"; } |
    grep -E '^test_[a-z0-9_]+$' | grep -v -E '^test_(netns|systemd)$' |
    grep -v -x -F -f <(tr ' ' '\n' <<<"$gpu_tests") |
    xargs -P "$JOBS" -I{} bash -c 'run_one {}' | tee -a "$OUT/summary.txt" "$OUT/tests.txt"
passed=$((passed + $(grep -c '^PASS' "$OUT/tests.txt")))
failed=$((failed + $(grep -c '^FAIL' "$OUT/tests.txt")))
note "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
