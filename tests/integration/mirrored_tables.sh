#!/usr/bin/env bash
# Embedding tables under the all-reduce strategies through real psctl/psworker processes, on
# a synthetic rating file (no network): a matrix factorisation (four tables, Adagrad) under
# psctl local --strategy mirrored --workers 2 trains (val_rmse falls below 1.0 in 3 epochs),
# its tables mirrored and found equal on both workers after the last step; a table over
# --max-mirrored-table-mb is refused at start, before any training, naming the table, its
# size, the bound and --strategy parameter_server, and taken once the bound is raised;
# psworker --help states the bound.
# usage: mirrored_tables.sh PSWORKER PSCTL. Exit 0 ok, 1 failed.
set -uo pipefail
worker=$1
psctl=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-mirrored-tables.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0

has() { # NAME TEXT: the log holds TEXT
    if grep -qF -- "$2" "$1.log"; then
        echo "ok: $1: $2"
    else
        echo "FAIL: $1: no line with: $2"
        tail -5 "$1.log" | sed 's/^/    /'
        fail=1
    fi
}

# 6000 ratings of 60 users and 40 items: 3 + a rank-3 product + noise
python3 - <<'PY' || exit 1
import random
random.seed(3)
U, I = 60, 40
p = [[random.uniform(-1, 1) for _ in range(3)] for _ in range(U)]
q = [[random.uniform(-1, 1) for _ in range(3)] for _ in range(I)]
with open("ratings.tsv", "w") as f:
    f.write("user\titem\trating\n")
    for _ in range(6000):
        u, i = random.randrange(U), random.randrange(I)
        r = 3 + sum(a * b for a, b in zip(p[u], q[i])) + random.gauss(0, 0.1)
        f.write("%d\t%d\t%.4f\n" % (u, i, r))
PY
cat >ratings.json <<'JSON'
{"format": "csv", "path": "ratings.tsv", "delimiter": "\t", "id_columns": ["user", "item"],
 "columns": [], "label": "rating", "label_type": "float"}
JSON
mf() { # USERS OPTIMIZER: the model, users rows in the user tables
    cat <<JSON
{"name": "mf", "inputs": [{"name": "user", "ids": true}, {"name": "item", "ids": true}],
 "layers": [
  {"type": "Embedding", "name": "user_embedding", "inputs": "user", "input_dim": $1, "output_dim": 64},
  {"type": "Embedding", "name": "item_embedding", "inputs": "item", "input_dim": 40, "output_dim": 64},
  {"type": "Embedding", "name": "user_bias", "inputs": "user", "input_dim": 60, "output_dim": 1},
  {"type": "Embedding", "name": "item_bias", "inputs": "item", "input_dim": 40, "output_dim": 1},
  {"type": "Dot", "name": "dot", "inputs": ["user_embedding", "item_embedding"], "axes": 1},
  {"type": "Add", "name": "rating", "inputs": ["dot", "user_bias", "item_bias"]}],
 "loss": "mse", "optimizer": {"name": "$2", "learning_rate": 0.1}, "batch_size": 32}
JSON
}
mf 60 adagrad >mf.json
mf 2000000 adam >big.json

timeout 300 "$psctl" local --strategy mirrored --workers 2 --model mf.json --data ratings.json \
    -- --epochs 3 --validation-split 0.1 --progress plain >train.log 2>&1
rc=$?
if [ $rc != 0 ]; then
    echo "FAIL: psctl local --strategy mirrored with tables exited $rc"
    tail -5 train.log | sed 's/^/    /'
    fail=1
else
    has train "mirrored: 4 embedding table(s) mirrored on every worker, rows exchanged as rows"
    has train "variables and embedding tables equal on all 2 workers after step 255"
    rmse=$(grep -o "val_rmse: [0-9.]*" train.log | tail -1 | cut -d' ' -f2)
    if [ -n "$rmse" ] && awk -v r="$rmse" 'BEGIN { exit !(r < 1.0) }'; then
        echo "ok: mirrored matrix factorisation: val_rmse $rmse after 3 epochs"
    else
        echo "FAIL: mirrored matrix factorisation: val_rmse '${rmse}' (want < 1.0)"
        fail=1
    fi
fi

# [2000000, 64] with Adam (lazy Adam rows: values and two moments) is 1464.8 MiB
timeout 120 "$psctl" local --strategy mirrored --workers 2 --model big.json \
    --data ratings.json -- --epochs 1 --progress plain >big.log 2>&1
rc=$?
if [ $rc = 0 ]; then
    echo "FAIL: a table over the bound trained (exit 0)"
    fail=1
fi
has big "embedding 'user_embedding' [2000000, 64] takes 1464.8 MiB on every worker with its optimizer's slots (lazy_adam), more than --max-mirrored-table-mb 1024 MiB"
has big "train it with --strategy parameter_server"
has big "exit status 2 means bad configuration"
if grep -q "Epoch 1/" big.log; then
    echo "FAIL: big: training started before the refusal"
    fail=1
else
    echo "ok: big: refused before any training"
fi
# the bound is --max-mirrored-table-mb: [50000, 64] with Adam (36.6 MiB) refused under 32,
# taken under 40
mf 50000 adam >mid.json
timeout 120 "$psctl" local --strategy mirrored --workers 2 --model mid.json \
    --data ratings.json -- --epochs 1 --max-mirrored-table-mb 32 --progress plain >mid.log 2>&1
has mid "takes 36.6 MiB on every worker with its optimizer's slots (lazy_adam), more than --max-mirrored-table-mb 32 MiB"
timeout 120 "$psctl" local --strategy mirrored --workers 2 --model mid.json \
    --data ratings.json -- --epochs 1 --max-mirrored-table-mb 40 --progress plain \
    >mid_ok.log 2>&1 || { echo "FAIL: mid_ok: exited $?"; tail -5 mid_ok.log; fail=1; }
has mid_ok "variables and embedding tables equal on all 2 workers"

"$worker" --help >help.log 2>&1
has help "--max-mirrored-table-mb"
exit $fail
