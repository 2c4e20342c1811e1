#!/usr/bin/env bash
# MovieLens 100K (tests/tools/fetch_movielens.sh: RecBole 1.2.1's copy, 100,000 ratings):
# the held-out RMSE of examples/movielens_mf.json (matrix factorisation with biases) and
# examples/movielens_ncf.json (a neural recommender) after their specs' epochs (or EPOCHS), on the seeded
# 10% split psworker's --validation-split 0.1 makes (--seed 0: the same ratings held out
# in every run), and the job's samples/s:
#   - psworker --no-ps (the tables whole in the worker)
#   - psctl local --ps 2 --workers 2 --mode sync (the tables on psd, rows by id)
#   - psctl local --strategy mirrored --workers 2 (the tables mirrored, rows all-gathered)
# usage: bench/movielens.sh [BUILD]   (env EPOCHS=N: every run N epochs)
# Needs PyPI once (the dataset is cached); exits 77 without it. Benchmarks never run in
# the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,12p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
epochs=${EPOCHS:-}
inter=$(bash "$root/tests/tools/fetch_movielens.sh") || exit $?
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-ml.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 - "$root/examples/data/movielens_100k.json" "$inter" "$tmp/data.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.pop("comment", None)
spec["path"] = sys.argv[2]
json.dump(spec, open(sys.argv[3], "w"))
PY
report() { # NAME LOG
    local rmse rate
    rmse=$(grep -o "val_rmse: [0-9.]*" "$2" | tail -1 | cut -d' ' -f2)
    rate=$(grep -o "[0-9]* samples/s, [0-9.]* s)" "$2" | tail -1)
    printf "  %-40s val_rmse %s  (%s\n" "$1" "${rmse:-?}" "${rate:-no figure)}"
}
how=${epochs:+$epochs epochs}
echo "MovieLens 100K, ${how:-the epochs of each spec}, 10% held out (--validation-split 0.1, --seed 0)"
ep=()
[ -n "$epochs" ] && ep=(--epochs "$epochs")
for model in movielens_mf movielens_ncf; do
    "$build/worker/psworker" --no-ps yes --model "$root/examples/$model.json" \
        --data "$tmp/data.json" "${ep[@]}" --validation-split 0.1 --progress plain \
        >"$tmp/$model-local.log" 2>&1 || { tail -3 "$tmp/$model-local.log"; exit 1; }
    report "$model, --no-ps" "$tmp/$model-local.log"
    "$build/psctl/psctl" local --ps 2 --workers 2 --mode sync \
        --model "$root/examples/$model.json" --data "$tmp/data.json" \
        -- "${ep[@]}" --validation-split 0.1 --progress plain \
        >"$tmp/$model-psd.log" 2>&1 || { tail -3 "$tmp/$model-psd.log"; exit 1; }
    report "$model, 2 psd x 2 workers (sync)" "$tmp/$model-psd.log"
    "$build/psctl/psctl" local --strategy mirrored --workers 2 \
        --model "$root/examples/$model.json" --data "$tmp/data.json" \
        -- "${ep[@]}" --validation-split 0.1 --progress plain \
        >"$tmp/$model-mirrored.log" 2>&1 || { tail -3 "$tmp/$model-mirrored.log"; exit 1; }
    report "$model, mirrored 2 workers" "$tmp/$model-mirrored.log"
done
