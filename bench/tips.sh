#!/usr/bin/env bash
# bench/tips.sh: the training tips as options (docs/PERFORMANCE.md, "The training tips"):
# for each option, bytes on the wire per step (the chief's summary: bytes_sent_per_step),
# samples/s and test accuracy after EPOCHS epochs, beside the default, in the same run.
# The job: examples/mlp.json (784-128-10, Adam 0.001, batch 64 per worker) on Fashion-MNIST,
# 2 workers x 1 thread; STRATEGY=ps: 2 psd shards, sync; STRATEGY=mirrored: the ring
# all-reduce. REPS runs of each option, interleaved (option order rotated per round);
# the median samples/s and the first run's accuracy (sync runs are deterministic) are
# printed in a table, after one JSON line per run.
# Targets (issue 17): fp16 compression halves the bytes and costs at most 10% samples/s;
# top-k 1% cuts the bytes >= 20x.
# usage: bench/tips.sh [BUILD] (env REPS=3 EPOCHS=2 STRATEGY=ps OPTIONS="default fp16 ...")
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
reps=${REPS:-3}
epochs=${EPOCHS:-2}
strategy=${STRATEGY:-ps}
options=${OPTIONS:-default fp16 bf16 topk1 accum4 accum4_b16 sync4 cosine_warmup global_clipnorm mixed_float16 mixed_bfloat16}
psctl=$build/psctl/psctl
[ -x "$psctl" ] || { echo "tips: no $psctl (build first)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-tips.XXXXXX")
trap 'rm -rf "$out"' EXIT

# model specs: examples/mlp.json with another optimizer
spec_with() { # name python-expression-for-the-optimizer
    /usr/bin/python3 - "$root/examples/mlp.json" "$out/$1.json" "$2" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["optimizer"] = eval(sys.argv[3])
json.dump(spec, open(sys.argv[2], "w"))
PY
}
# 2 epochs of 2 x 30,000 / 64 = 469 steps per epoch: warm up over the first 100 steps
spec_with cosine '{"name": "adam", "learning_rate": {"module": "keras.optimizers.schedules", "class_name": "CosineDecay", "config": {"initial_learning_rate": 0.0, "decay_steps": 838, "alpha": 0.0, "warmup_target": 0.001, "warmup_steps": 100, "name": "CosineDecay"}, "registered_name": None}}'
spec_with clip '{"name": "adam", "learning_rate": 0.001, "global_clipnorm": 1.0}'

args_of() { # option -> psworker args (the model is given separately)
    case $1 in
        default) echo "" ;;
        fp16) echo "--compression fp16" ;;
        bf16) echo "--compression bf16" ;;
        topk1) echo "--compression topk:0.01" ;;
        accum4) echo "--accumulate-steps 4" ;;
        accum4_b16) echo "--accumulate-steps 4 --batch 16" ;;
        sync4) echo "--sync-every 4" ;;
        cosine_warmup | global_clipnorm) echo "" ;;
        mixed_float16 | mixed_bfloat16) echo "--dtype-policy $1" ;;
        *) echo "tips: unknown option $1" >&2; exit 2 ;;
    esac
}
model_of() {
    case $1 in
        cosine_warmup) echo "$out/cosine.json" ;;
        global_clipnorm) echo "$out/clip.json" ;;
        *) echo "$root/examples/mlp.json" ;;
    esac
}
case $strategy in
    ps) cluster=(--ps 2 --mode sync) ;;
    mirrored) cluster=(--strategy mirrored) ;;
    *) echo "tips: STRATEGY is ps or mirrored" >&2; exit 2 ;;
esac

run() { # option
    local opt=$1 s=$out/summary.json
    rm -f "$s"
    # shellcheck disable=SC2046
    timeout 900 "$psctl" local "${cluster[@]}" --workers 2 --epochs "$epochs" \
        --model "$(model_of "$opt")" --summary "$s" -- --progress none $(args_of "$opt") \
        >"$out/run.log" 2>&1 || { echo "tips: $opt failed:" >&2; tail -20 "$out/run.log" >&2; exit 1; }
    /usr/bin/python3 - "$s" "$opt" "$strategy" <<'PY' | tee -a "$out/all"
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"option": sys.argv[2], "strategy": sys.argv[3],
                  "bytes_sent_per_step": s.get("bytes_sent_per_step"),
                  "samples_per_sec": round(s["samples_per_sec"]),
                  "test_accuracy": s["test_accuracy"], "steps": s["steps"]}))
PY
}

read -r -a opts <<<"$options"
for r in $(seq "$reps"); do
    n=${#opts[@]}
    for i in $(seq 0 $((n - 1))); do
        run "${opts[$(((i + r - 1) % n))]}"
    done
done

/usr/bin/python3 - "$out/all" "$options" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
order = sys.argv[2].split()
by = {o: [r for r in rows if r["option"] == o] for o in order}
base = by["default"][0] if by.get("default") else None
base_bytes = base and base["bytes_sent_per_step"]
base_sps = by.get("default") and statistics.median(r["samples_per_sec"] for r in by["default"])
print("| option | bytes/step | vs default | samples/s (median) | vs default | test accuracy | vs default |")
print("|---|---|---|---|---|---|---|")
for o in order:
    rs = by[o]
    b = rs[0]["bytes_sent_per_step"]
    sps = statistics.median(r["samples_per_sec"] for r in rs)
    acc = rs[0]["test_accuracy"]
    rb = f"{base_bytes / b:.1f}x fewer" if base_bytes and b else "-"
    rs_ = f"{sps / base_sps:.2f}x" if base_sps else "-"
    ra = f"{acc - base['test_accuracy']:+.4f}" if base else "-"
    print(f"| {o} | {b:,.0f} | {rb} | {sps:,.0f} ({', '.join(str(r['samples_per_sec']) for r in rs)}) | {rs_} | {acc:.4f} | {ra} |")
PY
