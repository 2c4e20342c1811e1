#!/usr/bin/env bash
# keras.applications networks as Keras 3 writes them (tests/fixtures/keras/apps/, made by
# make_apps_networks.py beside them) train here: each loads with Keras' own parameter counts
# (all and trainable), and 6 steps on one batch of 8 Fashion-MNIST images (28x28 gray,
# adapted to the network's input as psworker does; Adam 1e-3) bring the training loss well
# down (its lowest below 0.7 x the first step's): the forward and backward passes of every
# layer it has work together. VGG16 (no batch normalization, 33M parameters) diverges at
# Adam 1e-3 from scratch: it gets 1e-4, 10 steps and 0.8 x.
# usage: applications.sh PSWORKER SOURCE_ROOT [NETWORK...] (default: every one there).
# Exit 0 ok, 1 failed, 77 skipped (no Fashion-MNIST).
set -uo pipefail
worker=$1
root=$2
shift 2
data=${PS_TEST_DATA:-/usr/share/datasets/fashion-mnist}
[ -e "$data/train-images-idx3-ubyte.gz" ] || [ -e "$data/train-images-idx3-ubyte" ] ||
    { echo "no Fashion-MNIST in $data"; exit 77; }
fx=$root/tests/fixtures/keras/apps
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-apps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
nets=("$@")
[ ${#nets[@]} -gt 0 ] || for f in "$fx"/*.json.gz; do n=${f##*/}; nets+=("${n%.json.gz}"); done
fail=0
for net in "${nets[@]}"; do
    zcat "$fx/$net.json.gz" >"$net.json" || { echo "FAIL $net: no fixture"; fail=1; continue; }
    lr=0.001 steps=6 factor=0.7
    [ "$net" = VGG16 ] && lr=0.0001 steps=10 factor=0.8
    printf '{"keras": "%s.json", "loss": "sparse_categorical_crossentropy", "optimizer": {"name": "adam", "learning_rate": %s}}\n' \
        "$net" "$lr" >"$net.spec.json"
    start=$(date +%s.%N)
    if ! timeout 600 "$worker" --no-ps yes --model "$net.spec.json" --data "$data" \
        --max-train 8 --batch 8 --epochs $steps --max-test 8 --progress none \
        --history "$net.history.json" \
        --summary "$net.summary.json" >"$net.log" 2>&1; then
        echo "FAIL $net: psworker failed:"; grep -v Prescott "$net.log" | tail -3
        fail=1
        continue
    fi
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    read -r want_all want_trainable <"$fx/$net.params"
    /usr/bin/python3 - "$net" "$want_all" "$want_trainable" "$secs" $steps $factor <<'PY' || fail=1
import json, sys
net, want_all, want_tr, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
steps, factor = int(sys.argv[5]), float(sys.argv[6])
s = json.load(open(net + ".summary.json"))
loss = json.load(open(net + ".history.json"))["loss"]
bad = []
if (s["params"], s["trainable_params"]) != (want_all, want_tr):
    bad.append(f"{s['params']} parameters ({s['trainable_params']} trainable), Keras counts "
               f"{want_all} ({want_tr})")
if len(loss) != steps or not min(loss[1:]) < factor * loss[0]:
    bad.append(f"the loss did not fall below {factor} x the first step's: {loss}")
print(("FAIL " if bad else "ok   ") + f"{net}: {want_all} parameters, loss {loss[0]:.3f} -> "
      f"{min(loss[1:]):.3f} in {steps} steps ({secs:.1f} s)" + ("; " + "; ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
PY
done
[ $fail = 0 ] && echo "applications: ok (${#nets[@]} networks)"
exit $fail
