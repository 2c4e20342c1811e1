#!/usr/bin/env bash
# psworker trains from each format --data takes, made here from Fashion-MNIST: a PNG
# image folder (2 classes), a JPEG folder (10 classes, 64x64 RGB: resized to the
# model's input), TFRecord shards of PNG images (two workers through psctl local, shared
# by file), an .npz and a CSV table (NumPy), each through a data spec or detected (and
# psctl data inspect and bench on them); the
# test set from --test-data (and psworker --evaluate on it); a held-out validation split
# reported as val_accuracy; --positive-classes applied as TFRecord records are read.
# Hostile files: a truncated JPEG fails naming the file, or is skipped and counted with
# "on_error": "skip"; a PNG declaring 100000x100000 pixels is refused before anything is
# allocated; an image folder with a symlink loop is read without following it.
# usage: data_formats.sh PSWORKER PSCTL SOURCE_ROOT. Exit 0 ok, 1 failed.
set -uo pipefail
worker=$1
psctl=$2
root=$3
data=${PS_TEST_DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-data.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
sanitized=${PS_SANITIZED:-0}

run() { # NAME CMD...: runs CMD with a bound, its output in NAME.log; 0 when it exited 0
    local name=$1
    shift
    timeout 300 "$@" >"$name.log" 2>&1
    local rc=$?
    if [ $rc != 0 ]; then
        echo "FAIL: $name: $* exited $rc"
        tail -5 "$name.log" | sed 's/^/    /'
        fail=1
    fi
    return $rc
}

check_acc() { # NAME MIN: the log's "test accuracy: A" is at least MIN
    local acc
    acc=$(sed -n 's/^\(\[worker 0\] \)\{0,1\}test accuracy: \([0-9.]*\).*/\2/p' "$1.log" | tail -1)
    if [ -z "$acc" ] || ! awk -v a="$acc" -v m="$2" 'BEGIN { exit !(a >= m) }'; then
        echo "FAIL: $1: test accuracy '${acc}', want at least $2"
        fail=1
    else
        echo "ok: $1: test accuracy $acc (at least $2)"
    fi
}

has() { # NAME TEXT: the log holds TEXT
    if grep -qF -- "$2" "$1.log"; then
        echo "ok: $1: $2"
    else
        echo "FAIL: $1: no line with: $2"
        tail -5 "$1.log" | sed 's/^/    /'
        fail=1
    fi
}

# the datasets
run convert_png "$psctl" data convert "$data" png2 --to png --classes 0,1 --max 1200 || exit 1
run convert_png_test "$psctl" data convert "$data" png2_test --to png --classes 0,1 --max 400 \
    --test || exit 1
run convert_jpg "$psctl" data convert "$data" jpg10 --to jpeg --max 1500 --size 64x64 \
    --channels 3 || exit 1
run convert_tfr "$psctl" data convert "$data" train.tfrecord --to tfrecord --shards 4 \
    --max 2400 || exit 1
run convert_tfr_test "$psctl" data convert "$data" test.tfrecord --to tfrecord --image jpeg \
    --max 500 --test || exit 1
/usr/bin/python3 - "$data" <<'PY' || { echo "FAIL: numpy could not write the .npz and CSV"; exit 1; }
import gzip, sys
import numpy as np
d = sys.argv[1]
def idx(name, off):
    with gzip.open(f"{d}/{name}.gz") as f:
        return np.frombuffer(f.read(), np.uint8)[off:]
x = idx("train-images-idx3-ubyte", 16).reshape(-1, 28, 28, 1)[:2000]
y = idx("train-labels-idx1-ubyte", 8)[:2000].astype(np.int64)
np.savez("fashion.npz", x=x, y=y)
# a table: the mean of each 4x4 block (49 features) and the label, last
blocks = x.reshape(-1, 7, 4, 7, 4).mean(axis=(2, 4)).reshape(-1, 49) / 255.0
cols = [f"b{i}" for i in range(49)]
with open("fashion.csv", "w") as f:
    f.write(",".join(cols + ["label"]) + "\n")
    for row, label in zip(blocks, y):
        f.write(",".join(f"{v:.4f}" for v in row) + f",{label}\n")
PY

rescale='"preprocess": [{"rescale": 0.00392156862745098}]'
echo "{\"path\": \"png2\", \"channels\": 1, $rescale}" >png.json
echo "{\"path\": \"png2_test\", \"channels\": 1, $rescale}" >png_test.json
echo '{"path": "jpg10", "channels": 1, "validation_split": 0.2,
       "preprocess": [{"resize": [28, 28]}, {"rescale": 0.00392156862745098}]}' >jpg.json
echo "{\"path\": \"train.tfrecord-*\", \"channels\": 1, $rescale, \"shuffle_buffer\": 256}" >tfr.json
echo "{\"path\": \"test.tfrecord\", \"channels\": 1, $rescale}" >tfr_test.json
echo "{\"path\": \"fashion.npz\", $rescale}" >npz.json
train=(--no-ps yes --epochs 2 --progress plain --seed 3)

# psctl data: what the pipeline would read, and how fast
run inspect "$psctl" data inspect png.json --records 2 && {
    has inspect "format: image folder (image_folder)"
    has inspect "classes: 0 = 00, 1 = 01"
    has inspect "record 1: 28x28x1, label 0"
    has inspect "preprocessed (evaluation): 28x28x1, min 0 max 1"
}
run inspect_tfr "$psctl" data inspect 'train.tfrecord-*' --records 1 && {
    has inspect_tfr "records: 2400 in 4 files"
    has inspect_tfr "labels: not known without reading every record"
}
run bench "$psctl" data bench jpg.json --threads 2 --records 300 && {
    has bench "image folder: 300 records -> 28x28x1, 2 threads:"
    has bench "records per CPU second"
}
timeout 30 "$psctl" data inspect nowhere.json >nowhere.log 2>&1
rc=$?
if [ $rc != 1 ] || ! grep -q "nowhere.json" nowhere.log; then
    echo "FAIL: psctl data inspect of a missing spec: exit $rc, want 1 naming it"
    fail=1
else
    echo "ok: psctl data inspect of a missing spec: $(head -1 nowhere.log)"
fi

# an image folder, 2 classes, its own test folder: T-shirts against trousers
run png "$worker" "${train[@]}" --data png.json --test-data png_test.json --save png.model && {
    check_acc png 0.9
    has png "classes: 0 = 00, 1 = 01"
    # the saved model evaluated alone on the same streamed test set: the same figure
    run png_eval "$worker" --evaluate png.model --test-data png_test.json && {
        want=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' png.log)
        check_acc png_eval "$want"
    }
}
# JPEG, 10 classes of 64x64 RGB, read as gray and resized by the spec; a validation split
run jpg "$worker" "${train[@]}" --data jpg.json --test-data tfr_test.json && {
    has jpg "validation: 300 of 1500 records held out"
    has jpg "val_accuracy"
    check_acc jpg 0.5
}
# TFRecord shards, two workers through psd: each reads its own files
run tfr "$psctl" local --ps 1 --workers 2 --mode sync --epochs 2 --data tfr.json -- \
    --test-data tfr_test.json && {
    check_acc tfr 0.55
    has tfr "records per epoch, shared by file"
}
# relabelled as the records are read: tops (T-shirt, pullover, coat, shirt) against the
# rest, a binary model (0.6 of the test set is negative)
run relabel "$worker" "${train[@]}" --model "$root/examples/binary_classifier.json" \
    --data tfr.json --test-data tfr_test.json --positive-classes 0,2,4,6 && {
    has relabel "labels: binary"
    check_acc relabel 0.8
}
# NumPy and CSV
run npz "$worker" "${train[@]}" --data npz.json --validation-split 0.25 && {
    has npz "NumPy fashion.npz[x] (2000 records of 28x28x1)"
    has npz "val_accuracy"
}
cat >tabular.json <<'EOF'
{"name": "tabular", "input_shape": [49],
 "layers": [{"type": "Dense", "units": 32, "activation": "relu"}, {"type": "Dense", "units": 10}],
 "loss": "sparse_categorical_crossentropy", "from_logits": true,
 "optimizer": {"name": "adam", "learning_rate": 0.003}, "batch_size": 32}
EOF
run csv "$worker" "${train[@]}" --model tabular.json --data fashion.csv --validation-split 0.2 && {
    has csv "CSV fashion.csv (2000 rows, 49 features, label \"label\")"
    has csv "val_accuracy"
}

# hostile files: each alone among good images, named in one error (exit status 2)
expect_fail() { # NAME PATTERN WHAT: psworker on bad.json fails naming what PATTERN matches
    timeout 120 "$worker" "${train[@]}" --data bad.json >"$1.log" 2>&1
    local rc=$?
    if [ $rc != 2 ] || ! grep -q -- "$2" "$1.log"; then
        echo "FAIL: $3: exit $rc, want 2 and an error matching: $2"
        tail -3 "$1.log" | sed 's/^/    /'
        fail=1
    else
        echo "ok: $3: $(grep -o -- "$2.*" "$1.log" | head -1)"
    fi
}
mkdir -p bad/a bad/b && cp png2/00/* bad/a/ 2>/dev/null
cp png2/01/* bad/b/
first_jpg=$(ls jpg10/00 | head -1)
head -c 300 "jpg10/00/$first_jpg" >bad/b/cut.jpg
ln -s .. bad/a/loop
echo "{\"path\": \"bad\", \"channels\": 1, $rescale}" >bad.json
expect_fail cut "bad/b/cut.jpg" "a truncated JPEG"
echo "{\"path\": \"bad\", \"channels\": 1, \"on_error\": \"skip\", $rescale}" >skip.json
run skip "$worker" "${train[@]}" --data skip.json && {
    has skip "unreadable records skipped so far"
    has skip "the first: bad/b/cut.jpg"
}
rm -f bad/b/cut.jpg
# a FIFO named like an image: never opened for a blocking read
mkfifo bad/b/fifo.png
expect_fail fifo "bad/b/fifo.png: not a regular file" "a FIFO among the images"
rm -f bad/b/fifo.png
/usr/bin/python3 - <<'PY'
import struct, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 0, 0, 0, 0)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
open("bad/b/huge.png", "wb").write(png)
PY
expect_fail huge "bad/b/huge.png.*100000" "a PNG of 100000x100000"
exit $fail
