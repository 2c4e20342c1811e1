#!/usr/bin/env bash
# The project's side of "Against TensorFlow" (docs/PERFORMANCE.md): training samples/s of
# examples/fashion_cnn.json and examples/mobilenetv2_train.json (MobileNetV2 alpha 0.35,
# 32x32x3: Fashion-MNIST padded 28->32, the channel repeated) with 2 workers x 1 thread,
# (p) through 2 psd shards, sync, and (m) the mirrored all-reduce strategy, REPS runs each,
# interleaved; STEPS steps per worker (per-worker batch: the spec's, 64: global batch 128).
# Prints one JSON line per run and the median per setup. TensorFlow's side:
# bench/tf_compare.sh (its single-process run with --batch 128 is the same global batch).
# MODELS and SETUPS narrow it (e.g. MODELS=fashion_cnn.json SETUPS=mirrored).
# Usage: bench/cnn_strategies.sh [BUILD] (env REPS=3 STEPS=300
#        MODELS="fashion_cnn.json mobilenetv2_train.json" SETUPS="ps_sync mirrored")
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,11p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
reps=${REPS:-3}
steps=${STEPS:-300}
psctl=$build/psctl/psctl
[ -x "$psctl" ] || { echo "cnn_strategies: no $psctl (build first)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-cnn.XXXXXX")
trap 'rm -rf "$out"' EXIT

run() { # model setup-name psctl-args...
    local model=$1 name=$2
    shift 2
    local log=$out/run.log
    timeout 900 "$psctl" local "$@" --workers 2 --model "$root/examples/$model" -- \
        --max-steps "$steps" --max-test 500 --progress none >"$log" 2>&1 ||
        { echo "cnn_strategies: $model $name failed:" >&2; tail -20 "$log" >&2; exit 1; }
    local sps
    sps=$(sed -n 's/.*\[worker 0\] test accuracy.* \([0-9]*\) samples\/s.*/\1/p' "$log" | tail -1)
    [ -n "$sps" ] || { echo "cnn_strategies: no samples/s in the chief's output" >&2; tail -20 "$log" >&2; exit 1; }
    echo "{\"model\": \"$model\", \"setup\": \"$name\", \"steps_per_worker\": $steps, \"samples_per_sec\": $sps}"
    echo "$model $name $sps" >>"$out/all"
}

setup() { # name
    case $1 in
        ps_sync) run "$model" ps_sync --ps 2 --mode sync ;;
        mirrored) run "$model" mirrored --strategy mirrored ;;
        *) echo "cnn_strategies: unknown setup $1" >&2; exit 2 ;;
    esac
}
setups=(${SETUPS:-ps_sync mirrored})
for model in ${MODELS:-fashion_cnn.json mobilenetv2_train.json}; do
    for r in $(seq "$reps"); do # interleaved, the order reversed every other repeat
        if [ $((r % 2)) = 1 ]; then
            for ((i = 0; i < ${#setups[@]}; i++)); do setup "${setups[i]}"; done
        else
            for ((i = ${#setups[@]} - 1; i >= 0; i--)); do setup "${setups[i]}"; done
        fi
    done
done
echo "medians (samples/s, $reps runs each):"
sort -k1,2 "$out/all" | awk '{k=$1" "$2; v[k]=v[k]" "$3} END {for (k in v) print k, v[k]}' |
    while read -r model name vals; do
        med=$(tr ' ' '\n' <<<"$vals" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        echo "  $model $name: $med (runs:$vals)"
    done
