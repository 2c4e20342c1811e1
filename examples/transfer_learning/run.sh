#!/usr/bin/env bash
# Transfer learning on Fashion-MNIST, the Keras way (docs/TRAINING.md, "Transfer learning"):
#   1. train a base CNN briefly and export it as a Keras 3 file (no downloaded weights
#      exist on these machines: the base is trained here first);
#   2. load that base, freeze it, put a new head on it and train the head alone
#      (new_head.json: "trainable": false, "head");
#   3. unfreeze the top layers and fine-tune them at a tenth of the learning rate
#      (fine_tune.json: "trainable": {...}); the BatchNormalization layers stay frozen,
#      in inference mode, as Keras' guide advises.
# usage: run.sh [DIR]  (DIR: where the files go, default a new temporary directory)
# Each stage runs a real job: psd + 2 workers under psctl local (stage 1 alone, --no-ps).
# psworker and psctl come from PATH, or from the directory PS_BIN (an install's bin/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${PS_BIN:-}
worker=${bin:+$bin/}psworker
psctl=${bin:+$bin/}psctl
data=${PS_DATA:-/usr/share/datasets/fashion-mnist}
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/transfer.XXXXXX")}
mkdir -p "$out"
cp "$here"/base.json "$here"/new_head.json "$here"/fine_tune.json "$out"/
cd "$out"
echo "== 1. the base, trained alone for one epoch, exported to base.keras"
"$worker" --no-ps yes --model base.json --data "$data" --epochs 1 --progress none \
    --export base.keras
echo "== 2. the base frozen, a new head trained through psd (2 workers)"
"$psctl" local --ps 1 --workers 2 --mode sync -- --model new_head.json --data "$data" --epochs 1 \
    --progress none --export new_head.keras
echo "== 3. the top layers unfrozen, fine-tuned at a tenth of the learning rate"
"$psctl" local --ps 1 --workers 2 --mode sync -- --model fine_tune.json --data "$data" --epochs 1 \
    --progress none --export fine_tuned.keras
echo "files in $out"
