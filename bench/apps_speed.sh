#!/usr/bin/env bash
# Training samples/s of the keras.applications networks (tests/fixtures/keras/apps/, as
# Keras 3 writes them; the `applications` test trains them) here and in TensorFlow, on the
# same cores, the same input size, global batch and optimizer (Adam 1e-3):
#   this project: 2 workers x 1 thread, mirrored (psctl local --strategy mirrored),
#                 per-worker batch BATCH/2, STEPS steps per worker;
#   TensorFlow:   one process, Keras 3 and tf_keras, default threads and 1 thread
#                 (bench/tf_apps.py), batch BATCH, WARMUP steps then STEPS timed.
# Prints one JSON line per run and a table with each network's ratio to TensorFlow's best.
# TF_RUNS picks TensorFlow's configurations, KERAS:THREADS (KERAS 3 or 2, THREADS 0 for
# TensorFlow's default pools; empty: none); a column left out prints as empty.
# usage: bench/apps_speed.sh [BUILD] [NETWORK...]   (env BATCH=64 STEPS=40 WARMUP=10
#        TF_RUNS="3:0 3:1 2:0 2:1")
# $TF_VENV (default /tmp/tfvenv): made like bench/tf_compare.sh's when missing (PyPI).
# Benchmarks never run in the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,15p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
shift || true
batch=${BATCH:-64}
steps=${STEPS:-40}
warmup=${WARMUP:-10}
venv=${TF_VENV:-/tmp/tfvenv}
tf_version=2.21.0
data=${PS_DATA:-/usr/share/datasets/fashion-mnist}
psctl=$build/psctl/psctl
[ -x "$psctl" ] || { echo "apps_speed: no $psctl (build first)" >&2; exit 2; }
fx=$root/tests/fixtures/keras/apps
nets=("$@")
[ ${#nets[@]} -gt 0 ] || nets=(MobileNet MobileNetV2 MobileNetV3Small MobileNetV3Large ResNet50
    ResNet50V2 DenseNet121 VGG16 Xception NASNetMobile EfficientNetB0)
if ! "$venv/bin/python" -c 'import tensorflow, keras, tf_keras' 2>/dev/null; then
    echo "apps_speed: making the venv $venv (tensorflow-cpu $tf_version, tf_keras --no-deps)" >&2
    { [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"; } &&
        "$venv/bin/pip" install -q "tensorflow-cpu==$tf_version" &&
        "$venv/bin/pip" install -q --no-deps "tf_keras==$tf_version" ||
        { echo "apps_speed: cannot make the venv (no PyPI?)" >&2; exit 77; }
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-apps.XXXXXX")
trap 'rm -rf "$out"' EXIT
for net in "${nets[@]}"; do
    zcat "$fx/$net.json.gz" >"$out/$net.json" || exit 2
    printf '{"keras": "%s.json", "loss": "sparse_categorical_crossentropy", "optimizer": {"name": "adam", "learning_rate": 0.001}, "batch_size": %d}\n' \
        "$net" $((batch / 2)) >"$out/$net.spec.json"
    log=$out/$net.log
    if timeout 1800 "$psctl" local --strategy mirrored --workers 2 --model "$out/$net.spec.json" -- \
        --data "$data" --max-steps $((steps + warmup)) --max-test 200 --progress none >"$log" 2>&1; then
        sps=$(sed -n 's/.*\[worker 0\] test accuracy.* \([0-9]*\) samples\/s.*/\1/p' "$log" | tail -1)
        echo "{\"side\": \"project\", \"network\": \"$net\", \"setup\": \"mirrored 2x1\", \"batch\": $batch, \"samples_per_sec\": ${sps:-null}}"
        echo "$net project $sps" >>"$out/all"
    else
        echo "apps_speed: $net: the project's run failed:" >&2; tail -5 "$log" >&2
    fi
    for run in ${TF_RUNS-3:0 3:1 2:0 2:1}; do
        k=${run%%:*} t=${run#*:}
        case "$k:$t" in 3:0|3:1|2:0|2:1) ;; *) echo "apps_speed: TF_RUNS: $run is not 3:0, 3:1, 2:0 or 2:1" >&2; exit 2 ;; esac
        line=$(timeout 1800 "$venv/bin/python" "$here/tf_apps.py" "$net" --keras $k --threads $t \
            --batch "$batch" --steps "$steps" --warmup "$warmup" --data "$data" 2>"$out/tf.err" | tail -1)
        if [ -z "$line" ]; then
            echo "apps_speed: $net: TensorFlow (Keras $k, threads $t) failed:" >&2; tail -3 "$out/tf.err" >&2
            continue
        fi
        echo "$line"
        sps=$(sed -n 's/.*"samples_per_sec": \([0-9.]*\).*/\1/p' <<<"$line")
        echo "$net tf_k${k}_t$t $sps" >>"$out/all"
    done
done
echo
echo "| network | this project (mirrored, 2 x 1 thread) | Keras 3 default | Keras 3 1 thread | tf_keras default | tf_keras 1 thread | vs TensorFlow's best |"
echo "|---|---|---|---|---|---|---|"
for net in "${nets[@]}"; do
    awk -v n="$net" '$1 == n {v[$2] = $3}
        END {best = 0; for (k in v) if (k != "project" && v[k] > best) best = v[k];
             r = (best > 0 && v["project"] > 0) ? sprintf("%.2fx", v["project"] / best) : "-";
             printf "| %s | %s | %s | %s | %s | %s | %s |\n", n, v["project"], v["tf_k3_t0"],
                    v["tf_k3_t1"], v["tf_k2_t0"], v["tf_k2_t1"], r}' "$out/all"
done
