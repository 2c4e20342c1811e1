#!/usr/bin/env bash
# Keras 3 files both ways through real Keras: psworker trains a few steps (the MLP, the
# residual CNN with batch normalization, the applications layers' block of
# tests/fixtures/keras/apps_fmnist_k3.json, a Keras-written Sequential MLP from
# tests/fixtures/keras/mlp.keras, whose config.json the export keeps, and EfficientNet's layers
# from tests/fixtures/keras/effnet_fmnist.keras: Normalization with adapted statistics, which
# training leaves as they are, its count written back as int64), exports FILE.keras and
# FILE.weights.h5; Keras 3
# (keras + jax from PyPI in a venv: tests/tools/pyvenv.sh) loads them with
# keras.saving.load_model and model.load_weights and predicts the first 500 test samples:
# within 1e-5 of psworker --evaluate FILE.keras --predictions. Then psworker starts from
# the Keras-read files again: --model FILE.keras (its weights), --init-from FILE.weights.h5.
# And a Keras-written model whose nested base is frozen trains with it frozen
# (tests/tools/keras_frozen.py).
# usage: keras_roundtrip.sh PSWORKER SOURCE_ROOT. Exit 0 ok, 1 failed, 77 skipped (no PyPI,
# no Fashion-MNIST).
set -uo pipefail
worker=$1
root=$2
data=${PS_TEST_DATA:-/usr/share/datasets/fashion-mnist}
[ -e "$data/t10k-images-idx3-ubyte.gz" ] || [ -e "$data/t10k-images-idx3-ubyte" ] ||
    { echo "no Fashion-MNIST in $data"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-keras.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=$("$root/tests/tools/pyvenv.sh" keras3 keras==3.15.1 jax==0.4.38 jaxlib==0.4.38 \
    h5py==3.16.0 numpy==2.4.6)
rc=$?
[ $rc = 0 ] || exit $rc
cd "$tmp" || exit 1
n=500
fail=0
# the layers of keras.applications' newer networks (SeparableConv2D, Multiply, Rescaling,
# Cropping2D, LayerNormalization, swish and hard activations), a Keras-written to_json()
printf '{"keras": "%s", "loss": "sparse_categorical_crossentropy"}\n' \
    "$root/tests/fixtures/keras/apps_fmnist_k3.json" >"$tmp/apps.json"
for case in "mlp:$root/examples/mlp.json" "residual_cnn:$root/examples/residual_cnn.json" \
    "keras_mlp:$root/tests/fixtures/keras/mlp.keras" "apps:$tmp/apps.json" \
    "effnet:$root/tests/fixtures/keras/effnet_fmnist.keras"; do
    spec=${case%%:*}
    model=${case#*:}
    for ext in keras weights.h5; do
        if ! timeout 120 "$worker" --no-ps yes --model "$model" --data "$data" \
            --epochs 1 --max-train 1280 --max-steps 10 --max-test $n --progress none \
            --export "$spec.$ext" >"train-$spec-$ext.log" 2>&1; then
            echo "$spec: training with --export $spec.$ext failed:"; tail -5 "train-$spec-$ext.log"
            exit 1
        fi
    done
    if ! "$worker" --evaluate "$spec.keras" --data "$data" --max-test $n \
        --predictions "$spec.f32" >"eval-$spec.log" 2>&1; then
        echo "$spec: --evaluate $spec.keras failed:"; tail -5 "eval-$spec.log"
        exit 1
    fi
    # the same values in the other file: the same predictions from it
    "$worker" --evaluate "$spec.weights.h5" --model "$model" --data "$data" \
        --max-test $n --predictions "$spec.h5.f32" >/dev/null 2>&1 &&
        cmp -s "$spec.f32" "$spec.h5.f32" ||
        { echo "$spec: --evaluate $spec.weights.h5 differs from $spec.keras"; fail=1; }
    KERAS_BACKEND=jax PYTHONWARNINGS=ignore "$py" "$root/tests/tools/keras_predict.py" \
        "$spec.keras" "$spec.weights.h5" "$spec.f32" "$data" $n 1e-5 2>"keras-$spec.err" ||
        { echo "$spec: Keras' predictions differ:"; tail -5 "keras-$spec.err"; fail=1; }
    # Normalization's statistics: as adapted (training leaves them), count an int64 scalar
    if [ "$spec" = effnet ]; then
        "$py" - "$model" "$spec.weights.h5" >"stats-$spec.log" 2>&1 <<'PY' ||
import io, sys, zipfile
import h5py, numpy as np
src = h5py.File(io.BytesIO(zipfile.ZipFile(sys.argv[1]).read("model.weights.h5")), "r")
out = h5py.File(sys.argv[2], "r")
a, b = src["layers/normalization/vars"], out["layers/normalization/vars"]
assert all(np.array_equal(a[k][()], b[k][()]) for k in "012"), "statistics changed"
assert b["2"].dtype == np.int64 and b["2"].shape == (), (b["2"].dtype, b["2"].shape)
PY
            { echo "$spec: Normalization's statistics:"; tail -3 "stats-$spec.log"; fail=1; }
    fi
    # psworker starts from the exported files: the archive's weights are the model's
    timeout 120 "$worker" --no-ps yes --model "$spec.keras" --data "$data" --epochs 1 \
        --max-train 640 --max-steps 1 --max-test $n --progress none >"again-$spec.log" 2>&1 &&
        grep -q "initial values from $spec.keras" "again-$spec.log" ||
        { echo "$spec: --model $spec.keras did not start from its weights:"; tail -3 "again-$spec.log"; fail=1; }
    timeout 120 "$worker" --no-ps yes --model "$spec.keras" --init-from "$spec.weights.h5" \
        --data "$data" --epochs 1 --max-train 640 --max-steps 1 --max-test $n --progress none \
        >"init-$spec.log" 2>&1 && grep -q "initial values from $spec.weights.h5" "init-$spec.log" ||
        { echo "$spec: --init-from $spec.weights.h5 failed:"; tail -3 "init-$spec.log"; fail=1; }
done
# transfer learning from a file Keras wrote: its base frozen (base.trainable = False, nested),
# trained here, exported: the base bit-identical, the head trained, still frozen in Keras
KERAS_BACKEND=jax PYTHONWARNINGS=ignore "$py" "$root/tests/tools/keras_frozen.py" make frozen.keras \
    2>frozen-make.err || { echo "keras_frozen.py make failed:"; tail -3 frozen-make.err; exit 1; }
timeout 120 "$worker" --no-ps yes --model frozen.keras --data "$data" --epochs 1 --max-train 1280 \
    --max-steps 10 --max-test $n --progress none --export frozen-out.keras >frozen.log 2>&1 &&
    grep -q "frozen variables (" frozen.log ||
    { echo "frozen.keras: training failed or froze nothing:"; tail -3 frozen.log; fail=1; }
KERAS_BACKEND=jax PYTHONWARNINGS=ignore "$py" "$root/tests/tools/keras_frozen.py" check \
    frozen.keras frozen-out.keras 2>frozen-check.err ||
    { echo "frozen.keras:"; tail -3 frozen-check.err; fail=1; }
[ $fail = 0 ] && echo "keras_roundtrip: ok"
exit $fail
