#!/usr/bin/env bash
# bench/tf_clicks.sh: runs bench/tf_clicks.py (the TensorFlow
# ParameterServerStrategy peer of the click benchmark) with the TensorFlow
# venv, making the venv first when it is missing.
#
# usage: bench/tf_clicks.sh --train TRAIN.tsv --test TEST.tsv [tf_clicks.py options]
#        bench/tf_clicks.sh --help      (tf_clicks.py's options)
# Prints tf_clicks.py's JSON line on stdout, its progress on stderr.
# $TF_VENV: the virtual environment (default /tmp/tfvenv, the one
# bench/tf_compare.sh uses). When it is missing it is made with Debian's
# python3 and tensorflow-cpu and tf_keras (--no-deps, so that it does not pull
# the full tensorflow wheel over tensorflow-cpu's files) are installed into it
# from PyPI. Nothing is installed into the system Python; the build and the
# tests never run this.
# $TF_BENCH_LOGDIR: where the worker and ps processes' logs go (default: a
# temporary directory removed at the end).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
venv=${TF_VENV:-/tmp/tfvenv}
tf_version=2.21.0

if ! "$venv/bin/python" -c 'import tensorflow, tf_keras' 2>/dev/null; then
  echo "tf_clicks: making the venv $venv (tensorflow-cpu $tf_version, tf_keras --no-deps)" >&2
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q "tensorflow-cpu==$tf_version" >&2
  "$venv/bin/pip" install -q --no-deps "tf_keras==$tf_version" >&2
fi
exec "$venv/bin/python" "$here/tf_clicks.py" "$@"
