#!/usr/bin/env bash
# bench/cnn_accuracy.sh: test accuracy after the same number of epochs, the project beside
# TensorFlow/Keras (docs/PERFORMANCE.md, "Against TensorFlow", the accuracy target: within
# 0.01). For each model: the project with 2 workers x 1 thread, per-worker batch 64 (global
# batch 128), (m) mirrored and (p) 2 psd shards sync, EPOCHS epochs, evaluated on the 10,000
# test images; then TensorFlow's single process (Keras 3, bench/tf_keras_cnn.py) with batch
# 128 for the same number of steps (EPOCHS x 469, in timed chunks of 67 steps, the first
# one the warm-up), TF_REPS times
# (its runs are seeded: the repeats measure its samples/s spread, the accuracy repeats).
# Prints one JSON line per run. The TensorFlow venv is bench/tf_compare.sh's ($TF_VENV,
# default /tmp/tfvenv; run tf_compare.sh once to make it).
# SEEDS runs each side once per seed (the project's --seed, TensorFlow's --seed: its weights and
# shuffle); BN_MOMENTUM trains MobileNetV2 from a copy of its file with every
# BatchNormalization's momentum set to that value, on both sides.
# usage: bench/cnn_accuracy.sh [BUILD] (env EPOCHS=2 MODELS="fashion_cnn mobilenetv2"
#        TF_REPS=1 SIDES="ours tf" SETUPS="mirrored ps_sync" SEEDS=1 BN_MOMENTUM=)
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,16p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
epochs=${EPOCHS:-2}
models=${MODELS:-fashion_cnn mobilenetv2}
tf_reps=${TF_REPS:-1}
sides=${SIDES:-ours tf}
setups=${SETUPS:-mirrored ps_sync}
seeds=${SEEDS:-1}
bn_momentum=${BN_MOMENTUM:-}
py=${TF_VENV:-/tmp/tfvenv}/bin/python
psctl=$build/psctl/psctl
[ -x "$psctl" ] || { echo "cnn_accuracy: no $psctl (build first)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-acc.XXXXXX")
trap 'rm -rf "$out"' EXIT

# with_momentum M: a copy of MobileNetV2's file and its training spec with every
# BatchNormalization's momentum M; prints the spec's path
with_momentum() {
    python3 - "$root/examples" "$out" "$1" <<'PY' || exit 2
import json, os, sys
src, out, m = sys.argv[1], sys.argv[2], float(sys.argv[3])
model = json.load(open(os.path.join(src, "mobilenetv2.json")))
n = 0
def walk(layers):
    global n
    for l in layers:
        if l.get("class_name") == "BatchNormalization":
            l["config"]["momentum"] = m
            n += 1
walk(model["config"]["layers"])
if n == 0:
    sys.exit("cnn_accuracy: no BatchNormalization layer in mobilenetv2.json")
json.dump(model, open(os.path.join(out, "mobilenetv2_bn.json"), "w"))
spec = json.load(open(os.path.join(src, "mobilenetv2_train.json")))
spec["keras"] = os.path.join(out, "mobilenetv2_bn.json")
json.dump(spec, open(os.path.join(out, "mobilenetv2_bn_train.json"), "w"))
print(os.path.join(out, "mobilenetv2_bn_train.json"))
PY
}

ours() { # model spec setup seed psctl-args...
    local model=$1 spec=$2 name=$3 seed=$4
    shift 4
    timeout 3600 "$psctl" local "$@" --workers 2 --epochs "$epochs" --model "$spec" --seed "$seed" \
        --summary "$out/summary.json" -- --progress none >"$out/run.log" 2>&1 ||
        { echo "cnn_accuracy: $model $name failed:" >&2; tail -20 "$out/run.log" >&2; exit 1; }
    local acc sps
    acc=$(sed -n 's/.*\[worker 0\] test accuracy: \([0-9.]*\).*/\1/p' "$out/run.log" | tail -1)
    sps=$(sed -n 's/.*\[worker 0\] test accuracy.* \([0-9]*\) samples\/s.*/\1/p' "$out/run.log" | tail -1)
    [ -n "$acc" ] || { echo "cnn_accuracy: no test accuracy in the chief's output" >&2; tail -20 "$out/run.log" >&2; exit 1; }
    echo "{\"side\": \"project\", \"model\": \"$model\", \"setup\": \"$name\", \"seed\": $seed, \"bn_momentum\": ${bn_momentum:-null}, \"epochs\": $epochs, \"global_batch\": 128, \"test_accuracy\": $acc, \"samples_per_sec\": ${sps:-null}}"
}

for model in $models; do
    tf_json=()
    case $model in
        fashion_cnn) spec=$root/examples/fashion_cnn.json
            [ -z "$bn_momentum" ] || { echo "cnn_accuracy: BN_MOMENTUM is for mobilenetv2 only" >&2; exit 2; } ;;
        mobilenetv2) spec=$root/examples/mobilenetv2_train.json
            if [ -n "$bn_momentum" ]; then
                spec=$(with_momentum "$bn_momentum")
                tf_json=(--keras-json "$out/mobilenetv2_bn.json")
            fi ;;
        *) echo "cnn_accuracy: unknown model $model" >&2; exit 2 ;;
    esac
    for seed in $seeds; do
        if [[ " $sides " == *" ours "* ]]; then
            [[ " $setups " == *" mirrored "* ]] && ours "$model" "$spec" mirrored "$seed" --strategy mirrored
            [[ " $setups " == *" ps_sync "* ]] && ours "$model" "$spec" ps_sync "$seed" --ps 2 --mode sync
        fi
        if [[ " $sides " == *" tf "* ]]; then
            [ -x "$py" ] || { echo "cnn_accuracy: no $py (run bench/tf_compare.sh once)" >&2; exit 2; }
            for r in $(seq "$tf_reps"); do
                TF_BENCH_LOGDIR=$out "$py" "$here/tf_keras_cnn.py" --model "$model" --config single \
                    --batch 128 --epochs "$epochs" --chunk 67 --warmup-chunks 1 --seed "$seed" "${tf_json[@]}" \
                    2>"$out/tf.log" || { echo "cnn_accuracy: TensorFlow run failed:" >&2; tail -20 "$out/tf.log" >&2; exit 1; }
            done
        fi
    done
done
