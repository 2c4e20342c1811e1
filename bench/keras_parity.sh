#!/usr/bin/env bash
# bench/keras_parity.sh: the project's training step by step against Keras 3's
# (docs/PERFORMANCE.md, "Parity with Keras, step by step"). For each network
# (keras.applications, 32x32x3, 10 classes, no pretrained weights) it saves a
# .keras archive with Adam, trains it in Keras (train_on_batch) and with
# bench/keras_trajectory on the same Fashion-MNIST batches in the same order,
# and prints per chosen step how far the loss, the BatchNormalization moving
# statistics and the first and last kernels are apart; beside them the project
# against itself with its initial weights nudged by one ulp, and each side
# against Keras in float64. See bench/keras_parity.py --help for the options.
#
# usage: bench/keras_parity.sh [BUILD_DIR] [keras_parity.py options...]
#   BUILD_DIR  a build with bench/keras_trajectory built (default: build)
#   e.g.  bench/keras_parity.sh build --nets mobilenetv2 --steps 300
# $PARITY_WORKDIR: where the archives and trajectories go (default: a new
# directory under /tmp, printed). The Python side runs in the virtual environment
# tests/tools/pyvenv.sh makes (keras 3.15.1, jax, from PyPI); exit 77 when it
# cannot be made (no network). Runs under nice -n 10. Never run by the tests.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$1
  shift
fi
traj=$build/bench/keras_trajectory
if [ ! -x "$traj" ]; then
  echo "keras_parity: $traj is not built (ninja -C $build bench/keras_trajectory)" >&2
  exit 1
fi
rc=0
py=$("$root/tests/tools/pyvenv.sh" keras3 keras==3.15.1 jax==0.4.38 jaxlib==0.4.38 \
  h5py==3.16.0 numpy==2.4.6) || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
work=${PARITY_WORKDIR:-$(mktemp -d /tmp/keras-parity.XXXXXX)}
echo "keras_parity: files in $work" >&2
KERAS_BACKEND=jax exec nice -n 10 "$py" "$root/bench/keras_parity.py" --trajectory "$traj" \
  --workdir "$work" "$@"
