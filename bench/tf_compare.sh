#!/usr/bin/env bash
# bench/tf_compare.sh: the TensorFlow/Keras baseline for the project's CNN
# training (docs/PERFORMANCE.md, "Against TensorFlow (issue 16)").
# For each model, (a) examples/fashion_cnn.json and (b) MobileNetV2 alpha 0.35
# on Fashion-MNIST padded to 32x32x3, two configurations:
#   single  one process, TensorFlow's default threads (Keras 3)
#   ps      ParameterServerStrategy: a chief (model.fit + ClusterCoordinator),
#           2 workers and 1 ps on 127.0.0.1 (Keras 2, tf_keras: Keras 3 does
#           not support ParameterServerStrategy)
# and prints one JSON line per run (samples/s after a warm-up chunk, test
# accuracy after the epochs), see bench/tf_keras_cnn.py --help.
#
# usage: bench/tf_compare.sh [EPOCHS_CNN] [EPOCHS_MOBILENET] [MODELS] [CONFIGS]
#   EPOCHS_CNN        passes over the training set for fashion_cnn (default 2)
#   EPOCHS_MOBILENET  the same for mobilenetv2 (default 2)
#   MODELS            space-separated, default "fashion_cnn mobilenetv2"
#   CONFIGS           space-separated, default "single ps"
# $TF_VENV: the virtual environment (default /tmp/tfvenv). When it is missing
# it is made with Debian's python3 and tensorflow-cpu and tf_keras (--no-deps,
# so that it does not pull the full tensorflow wheel over tensorflow-cpu's
# files) are installed into it from PyPI. Nothing is installed into the
# system Python; the build and the tests never run this.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
epochs_cnn=${1:-2}
epochs_mnv2=${2:-2}
models=${3:-fashion_cnn mobilenetv2}
configs=${4:-single ps}
venv=${TF_VENV:-/tmp/tfvenv}
tf_version=2.21.0

case "${1:-}" in -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

if ! "$venv/bin/python" -c 'import tensorflow, keras, tf_keras' 2>/dev/null; then
  echo "tf_compare: making the venv $venv (tensorflow-cpu $tf_version, tf_keras --no-deps)" >&2
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q "tensorflow-cpu==$tf_version" >&2
  "$venv/bin/pip" install -q --no-deps "tf_keras==$tf_version" >&2
fi
py="$venv/bin/python"

work=$(mktemp -d /tmp/ps-bench-tf.XXXXXX)
child=
trap '[ -n "$child" ] && kill "$child" 2>/dev/null; wait 2>/dev/null || true' EXIT INT TERM

echo "tf_compare: $("$py" -c 'import tensorflow as tf, keras, tf_keras; print("tensorflow", tf.__version__, "keras", keras.__version__, "tf_keras", tf_keras.__version__)'); logs in $work" >&2
for model in $models; do
  case $model in
    fashion_cnn) epochs=$epochs_cnn ;;
    mobilenetv2) epochs=$epochs_mnv2 ;;
    *) echo "tf_compare: unknown model $model" >&2; exit 2 ;;
  esac
  for config in $configs; do
    log="$work/$model-$config"
    mkdir -p "$log"
    echo "tf_compare: $py $here/tf_keras_cnn.py --model $model --config $config --epochs $epochs" >&2
    TF_BENCH_LOGDIR="$log" "$py" "$here/tf_keras_cnn.py" --model "$model" --config "$config" \
      --epochs "$epochs" >"$log/out.json" 2>"$log/stderr.log" &
    child=$!
    if ! wait "$child"; then
      child=
      echo "tf_compare: $model $config failed, see $log/stderr.log" >&2
      tail -n 5 "$log/stderr.log" >&2
      exit 1
    fi
    child=
    cat "$log/out.json"
  done
done
