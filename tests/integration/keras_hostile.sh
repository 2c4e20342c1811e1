#!/usr/bin/env bash
# psworker on bad Keras 3 files: a truncated or damaged .keras / .weights.h5, a weight of
# the wrong shape, a missing and an extra weight, a zip bomb (config.json of 17 MiB
# deflated to a few KiB), members named ../x and /etc/x: each exits with status 2 and one
# error line naming the file and the weight or member, no crash (the ASan build runs it
# too); transfer-learning wrappers naming a missing archive, an unknown layer, a weight of
# another shape, or freezing everything. The files are made here from
# tests/fixtures/keras/mlp.* and psworker's own export.
# usage: keras_hostile.sh PSWORKER SOURCE_ROOT. Exit 0 ok, 1 failed.
set -uo pipefail
worker=$1
root=$2
fx=$root/tests/fixtures/keras
data=${PS_TEST_DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-keras-bad.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0

# expect WANT ARGS...: psworker (training alone, or --evaluate when ARGS start with it) ARGS
# exits 2 with one error line holding WANT
expect() {
    local want=$1
    shift
    if [ "$1" = --evaluate ]; then
        timeout 60 "$worker" --data "$data" --max-test 64 "$@" >out.log 2>&1
    else
        timeout 60 "$worker" --no-ps yes --data "$data" --epochs 1 --max-train 640 --max-steps 1 \
            --max-test 64 --progress none "$@" >out.log 2>&1
    fi
    local rc=$? errs
    errs=$(grep -c -E '(^psworker: | error: )' out.log)
    if [ $rc != 2 ] || [ "$errs" != 1 ] || ! grep -qF -- "$want" out.log; then
        echo "FAIL: psworker $* exited $rc with $errs error lines, want 2 and one line with: $want"
        sed 's/^/    /' out.log | tail -5
        fail=1
    else
        echo "ok: $(grep -E '(^psworker: | error: )' out.log)"
    fi
}

spec() { # spec FILE UNITS...: an MLP of Dense layers (the last without activation)
    local f=$1 layers="" u
    shift
    for u in "$@"; do layers="$layers{\"type\": \"Dense\", \"units\": $u, \"activation\": \"relu\"}, "; done
    printf '{"input_shape": [784], "layers": [%s{"type": "Dense", "units": 10}], "loss": "sparse_categorical_crossentropy", "from_logits": true}\n' "$layers" >"$f"
}
spec two.json 128
spec small.json 64
spec three.json 128 10
"$worker" --no-ps yes --model two.json --data "$data" --epochs 1 --max-train 640 --max-steps 1 \
    --max-test 64 --progress none --export two.weights.h5 >/dev/null 2>&1 || { echo "export failed"; exit 1; }
"$worker" --no-ps yes --model three.json --data "$data" --epochs 1 --max-train 640 --max-steps 1 \
    --max-test 64 --progress none --export three.keras >/dev/null 2>&1 || { echo "export failed"; exit 1; }

/usr/bin/python3 - "$fx" <<'PY' || exit 1
import sys, zipfile
fx = sys.argv[1]
keras = open(fx + "/mlp.keras", "rb").read()
h5 = open(fx + "/mlp.weights.h5", "rb").read()
open("cut.keras", "wb").write(keras[:len(keras) // 2])
open("cut.weights.h5", "wb").write(h5[:len(h5) // 2])
flip = bytearray(keras); flip[len(flip) * 2 // 3] ^= 0xFF
open("flip.keras", "wb").write(bytes(flip))
with zipfile.ZipFile("bomb.keras", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("metadata.json", "{}")
    z.writestr("config.json", " " * (17 << 20))
    z.writestr("model.weights.h5", "x")
for name, member in (("dotdot.keras", "../x"), ("abs.keras", "/etc/x")):
    with zipfile.ZipFile(name, "w") as z:
        z.writestr("config.json", "{}")
        z.writestr(zipfile.ZipInfo(member), "x")
PY

expect "cut.keras: not a readable zip archive" --model cut.keras
expect "--init-from cut.keras: not a readable zip archive" --model "$fx/mlp.keras" --init-from cut.keras
expect "--init-from cut.weights.h5: " --model "$fx/mlp.keras" --init-from cut.weights.h5
expect "--model flip.keras: member 'model.weights.h5' is damaged" --model flip.keras
expect "--init-from two.weights.h5: layers/dense/vars/0: shape [784, 128], the model's dense_0/kernel is [784, 64]" \
    --model small.json --init-from two.weights.h5
expect "--init-from two.weights.h5: missing weight: the model's dense_2/kernel" \
    --model three.json --init-from two.weights.h5
expect "--init-from three.keras: layers/dense_2/vars/0: a weight of layer 'dense_2', which the model does not have" \
    --model two.json --init-from three.keras
expect "bomb.keras: member 'config.json' is 17825792 bytes uncompressed: more than the 16 MiB accepted" \
    --model bomb.keras
expect "--init-from bomb.keras: member 'model.weights.h5' is not an HDF5 file" \
    --model "$fx/mlp.keras" --init-from bomb.keras
expect "dotdot.keras: member '../x' escapes the archive" --model dotdot.keras
expect "abs.keras: member '/etc/x' escapes the archive" --model "$fx/mlp.keras" --init-from abs.keras
expect "mlp.weights.h5: a weights file has no architecture" --model "$fx/mlp.weights.h5"
expect "--evaluate $fx/cnn.weights.h5: layers/batch_normalization/vars/0: a weight of layer 'bn1', which the model does not have" \
    --evaluate "$fx/cnn.weights.h5"
# transfer-learning wrappers over an archive (docs/TRAINING.md, "Transfer learning")
wrap() { # wrap FILE ARCHIVE EXTRA: a spec wrapping ARCHIVE
    printf '{"keras": "%s", "loss": "sparse_categorical_crossentropy", "from_logits": true%s}\n' \
        "$2" "$3" >"$1"
}
wrap damaged.json cut.keras ""
expect "damaged.json: 'keras': cut.keras: not a readable zip archive" --model damaged.json
wrap cut.json "$fx/mlp.keras" ', "head": {"after": "nope", "layers": [{"type": "Dense", "units": 3}]}'
expect "'head': the Keras model has no layer named 'nope'" --model cut.json
wrap shape.json "$fx/mlp.keras" ', "head": {"after": "hidden", "layers": [{"type": "Dense", "units": 7, "name": "logits"}]}'
expect "mlp.keras: logits/kernel: 640 values, the model's has 448" --model shape.json
wrap frozen.json "$fx/mlp.keras" ', "trainable": false'
expect "every layer with weights is frozen (trainable: false): nothing would train" --model frozen.json
wrap name.json "$fx/mlp.keras" ', "trainable": {"hiddn": false}'
expect "'trainable': the Keras model has no layer named 'hiddn'" --model name.json
[ $fail = 0 ] && echo "keras_hostile: ok"
exit $fail
