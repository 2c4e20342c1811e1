#!/usr/bin/env bash
# The click model (examples/click_dlrm.json) on the synthetic click log, side by side with
# its peers in one run (docs/PERFORMANCE.md, "Click model"):
#   project   psctl local --ps 2 --workers 2 --mode sync: the 26 fields' rows by id on psd
#   project_async  the same, --mode async (each worker's push applied at once: the
#             semantics of TensorFlow's ParameterServerStrategy)
#   tf_ps     TensorFlow's ParameterServerStrategy: a chief, 2 workers, 2 ps, the
#             embedding variable sharded over the 2 ps (bench/tf_clicks.py)
#   torch_ddp PyTorch DDP (gloo), 2 processes x 1 thread, nn.EmbeddingBag(sparse=True)
#             (bench/torch_clicks.py)
# The same model (one table of dim 16 for the 26 fields, log1p counts, Dense 64-32-1),
# Adagrad 0.05, 256 per worker, the same rows: psctl data synth-clicks --seed 1 writes
# TRAIN + TEST rows, the first TRAIN train, the last TEST are the test set. Each prints
# training samples/s and the test set's AUC; the AUC ceiling (the true probabilities)
# comes from the generator.
# usage: bench/clicks.sh [BUILD] [TRAIN] [TEST] [PEERS]
#   BUILD  the build directory (default build); TRAIN, TEST rows (default 500000, 100000);
#   PEERS  space-separated, default "project project_async tf_ps torch_ddp"
# env EPOCHS (default 1). TensorFlow comes from $TF_VENV (default /tmp/tfvenv, made by
# bench/tf_clicks.sh from PyPI when missing); PyTorch is Debian's (/usr/bin/python3).
# Benchmarks never run in the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,20p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=$(cd "${1:-$root/build}" && pwd) || exit 2
n_train=${2:-500000}
n_test=${3:-100000}
peers=${4:-project project_async tf_ps torch_ddp}
epochs=${EPOCHS:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-clicks.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

"$build/psctl/psctl" data synth-clicks --rows $((n_train + n_test)) --seed 1 --out all.tsv >synth.log ||
    { cat synth.log; exit 1; }
head -n $((n_train + 1)) all.tsv >train.tsv
{ head -n 1 all.tsv; tail -n "$n_test" all.tsv; } >test.tsv
ceiling=$(python3 -c 'import json, sys; print("%.4f" % json.load(open(sys.argv[1]))["auc_ceiling"])' all.tsv.json)
echo "click log: $n_train training rows, $n_test test rows (seed 1); AUC ceiling $ceiling; $epochs epoch(s)"
python3 - "$root/examples/data/synth_clicks.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.pop("comment", None)
for name in ("train", "test"):
    spec["path"] = name + ".tsv"
    json.dump(spec, open(name + ".json", "w"))
PY

for peer in $peers; do
    case $peer in
    project | project_async)
        mode=sync
        [ "$peer" = project_async ] && mode=async
        "$build/psctl/psctl" local --ps 2 --workers 2 --mode $mode \
            --model "$root/examples/click_dlrm.json" --data train.json --summary "$peer.json" \
            -- --epochs "$epochs" --test-data test.json --progress plain >"$peer.log" 2>&1 ||
            { tail -5 "$peer.log"; exit 1; }
        python3 - "$peer.json" "$peer" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"peer": sys.argv[2], "config": "2 psd x 2 workers, " + sys.argv[3], "workers": 2,
                  "ps": 2, "batch_per_worker": 256, "samples_per_sec": round(s["samples_per_sec"]),
                  "train_seconds": round(s["wall_seconds"], 1), "test_auc": round(s["test_auc"], 4),
                  "test_loss": round(s["test_loss"], 4)}))
PY
        ;;
    tf_ps)
        bash "$here/tf_clicks.sh" --train train.tsv --test test.tsv --epochs "$epochs" \
            --workers 2 --ps 2 --batch 256 --lr 0.05 2>tf.log | tail -1 ||
            { tail -5 tf.log; exit 1; }
        ;;
    torch_ddp)
        /usr/bin/python3 "$here/torch_clicks.py" --train train.tsv --test test.tsv \
            --epochs "$epochs" --workers 2 --batch 256 --lr 0.05 2>torch.log | tail -1 ||
            { tail -5 torch.log; exit 1; }
        ;;
    *) echo "clicks.sh: unknown peer $peer" >&2; exit 2 ;;
    esac
done
