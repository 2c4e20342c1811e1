#!/usr/bin/env bash
# The source documents' job, shortened: MobileNetV2 (weights=None, 224x224x3, 2 classes;
# examples/mobilenetv2_224_train.json: Adam 0.001) trained from a folder of JPEG images
# (examples/data/cats_vs_dogs.json: resized to 224x224, divided by 255, a shuffle
# buffer of 1024) that psctl data convert makes from two Fashion-MNIST classes at 224x224
# RGB; under each strategy (parameter server with two workers and a psd, mirrored,
# multi-worker mirrored) a few steps over two epochs with the epoch's loss falling
# (--history). The optimised build only: the sanitizer build skips (exit 77), a step at
# 224x224 takes seconds there.
# usage: mobilenetv2_224.sh PSCTL SOURCE_ROOT. Exit 0 ok, 1 failed, 77 skipped.
set -uo pipefail
psctl=$1
root=$2
data=${PS_TEST_DATA:-/usr/share/datasets/fashion-mnist}
if [ "${PS_SANITIZED:-0}" = 1 ]; then
    echo "skip: MobileNetV2 at 224x224 under the sanitizers takes minutes a step"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-mnv2.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0

timeout 120 "$psctl" data convert "$data" cats_vs_dogs --to jpeg --classes 0,1 --max 64 \
    --size 224x224 --channels 3 >convert.log 2>&1 || { cat convert.log; exit 1; }
cp "$root/examples/data/cats_vs_dogs.json" "$root/examples/mobilenetv2_224.json" \
    "$root/examples/mobilenetv2_224_train.json" .

# train NAME ARGS...: two epochs of 3 steps of 8 per worker; the chief's history
train() {
    local name=$1
    shift
    timeout 400 "$psctl" local "$@" --workers 2 --model mobilenetv2_224_train.json \
        --data cats_vs_dogs.json --epochs 2 --batch 8 --history "$name.json" \
        -- --max-steps 3 >"$name.log" 2>&1
    local rc=$?
    if [ $rc != 0 ]; then
        echo "FAIL: $name: psctl local exited $rc"
        tail -5 "$name.log" | sed 's/^/    /'
        fail=1
        return
    fi
    if /usr/bin/python3 - "$name.json" <<'PY'; then
import json, sys
loss = json.load(open(sys.argv[1]))["loss"]
print("loss per epoch:", " ".join(f"{v:.4f}" for v in loss))
sys.exit(0 if len(loss) == 2 and loss[1] < loss[0] else 1)
PY
        echo "ok: $name: the loss fell"
    else
        echo "FAIL: $name: the loss did not fall over two epochs"
        fail=1
    fi
    grep -q "resize 224x224 (bilinear), rescale" "$name.log" ||
        { echo "FAIL: $name: no preprocess line"; fail=1; }
}
train parameter_server --ps 1 --mode sync
train mirrored --strategy mirrored
train multi_worker_mirrored --strategy multi_worker_mirrored
exit $fail
