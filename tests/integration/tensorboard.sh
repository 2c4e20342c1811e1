#!/usr/bin/env bash
# --tensorboard and --history read back by TensorBoard itself (issue 18): a short psctl local
# job (1 psd shard, 2 workers, sync, 3 epochs of 8 steps, an ExponentialDecay schedule) with
# --tensorboard DIR --tensorboard-every 5 --history FILE --summary FILE; then TensorBoard's
# EventAccumulator (the tensorboard package from PyPI in a venv: tests/tools/pyvenv.sh) loads
# DIR/train and DIR/validation and the checks are: every tag in its run and no other, one
# epoch point per epoch (steps 0..2), the batch_ points at steps 5, 10, 15, 20, the rates
# are the schedule's, the last validation epoch_loss/epoch_accuracy are the summary's
# test_loss/test_accuracy, the History lists have one entry per epoch and equal the events.
# usage: tensorboard.sh PSCTL SOURCE_ROOT. Exit 0 ok, 1 failed, 77 skipped (no PyPI).
set -uo pipefail
psctl=$1
root=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-tb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=$("$root/tests/tools/pyvenv.sh" tensorboard tensorboard==2.20.0)
rc=$?
[ $rc = 0 ] || exit $rc

/usr/bin/python3 - "$root/examples/mlp.json" "$tmp/model.json" <<'PY' || exit 1
import json, sys
spec = json.load(open(sys.argv[1]))
spec["optimizer"] = {"name": "adam", "learning_rate": {
    "module": "keras.optimizers.schedules", "class_name": "ExponentialDecay",
    "config": {"initial_learning_rate": 0.002, "decay_steps": 10, "decay_rate": 0.5,
               "staircase": False, "name": "ExponentialDecay"}, "registered_name": None}}
json.dump(spec, open(sys.argv[2], "w"))
PY

cd "$tmp" || exit 1
if ! timeout 120 "$psctl" local --ps 1 --workers 2 --mode sync --epochs 3 --model model.json \
    --tensorboard tb --tensorboard-every 5 --history history.json --summary summary.json \
    --timeout 100 -- --max-train 1024 --max-test 256 --max-steps 8 --progress none \
    >job.log 2>&1; then
    echo "the job failed:"; tail -20 job.log
    exit 1
fi

"$py" - <<'PY'
import glob, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EPOCHS, STEPS, EVERY = 3, 8, 5
def lr(step):  # ExponentialDecay(0.002, 10, 0.5) at the optimizer's step count
    return 0.002 * 0.5 ** (step / 10)

bad = []
def check(cond, what):
    if not cond:
        bad.append(what)

runs = {}
for run in ("train", "validation"):
    files = glob.glob(f"tb/{run}/events.out.tfevents.*")
    check(len(files) == 1, f"{run}: one event file, found {files}")
    ea = EventAccumulator(f"tb/{run}", size_guidance={"scalars": 0, "histograms": 0})
    ea.Reload()
    runs[run] = ea
train, val = runs["train"], runs["validation"]
batch_tags = ["batch_loss", "batch_accuracy", "batch_learning_rate", "batch_samples_per_sec",
              "batch_gradient_global_norm"]
epoch_train = ["epoch_loss", "epoch_accuracy", "epoch_learning_rate"]
check(sorted(train.Tags()["scalars"]) == sorted(batch_tags + epoch_train),
      f"train tags {train.Tags()['scalars']}")
check(sorted(val.Tags()["scalars"]) == ["epoch_accuracy", "epoch_loss"],
      f"validation tags {val.Tags()['scalars']}")
check(len(train.Tags()["histograms"]) > 0 and
      all(t.endswith("/histogram") for t in train.Tags()["histograms"]),
      f"histograms {train.Tags()['histograms']}")

def points(ea, tag):
    try:
        return [(e.step, e.value) for e in ea.Scalars(tag)]
    except KeyError:
        return []

for ea, tags, name in ((train, epoch_train, "train"), (val, ["epoch_loss", "epoch_accuracy"],
                                                        "validation")):
    for t in tags:
        check([s for s, _ in points(ea, t)] == list(range(EPOCHS)), f"{name} {t} steps")
want_steps = list(range(EVERY, EPOCHS * STEPS + 1, EVERY))
for t in batch_tags:
    check([s for s, _ in points(train, t)] == want_steps, f"train {t} steps {points(train, t)}")
for s, v in points(train, "batch_learning_rate"):
    check(math.isclose(v, lr(s - 1), rel_tol=1e-6), f"batch_learning_rate at {s}: {v}")
for e, v in points(train, "epoch_learning_rate"):
    check(math.isclose(v, lr((e + 1) * STEPS), rel_tol=1e-6), f"epoch_learning_rate at {e}: {v}")
for s, v in points(train, "batch_gradient_global_norm"):
    check(math.isfinite(v) and v > 0, f"batch_gradient_global_norm at {s}: {v}")
for s, v in points(train, "batch_samples_per_sec"):
    check(math.isfinite(v) and v > 0, f"batch_samples_per_sec at {s}: {v}")
for t in ("batch_loss", "batch_accuracy", "epoch_loss", "epoch_accuracy"):
    for s, v in points(train, t):
        check(math.isfinite(v) and v >= 0 and (v <= 1 or "loss" in t), f"train {t} at {s}: {v}")

summary = json.load(open("summary.json"))
def f32(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)
vl, va = points(val, "epoch_loss"), points(val, "epoch_accuracy")
check(vl and f32(vl[-1][1], summary["test_loss"]), f"last val epoch_loss {vl} vs {summary}")
check(va and f32(va[-1][1], summary["test_accuracy"]), f"last val epoch_accuracy {va}")
# the train run's epoch values are the job's (over both workers), as the summary's
tl, ta = points(train, "epoch_loss"), points(train, "epoch_accuracy")
check(tl and f32(tl[-1][1], summary["loss"]), f"last train epoch_loss {tl} vs job-wide {summary.get('loss')}")
check(ta and f32(ta[-1][1], summary["accuracy"]), f"last train epoch_accuracy {ta} vs job-wide {summary.get('accuracy')}")
check(summary.get("workers_reported") == 2, f"workers_reported {summary.get('workers_reported')}")

hist = json.load(open("history.json"))
check(sorted(hist) == ["accuracy", "loss", "val_accuracy", "val_loss"], f"history keys {list(hist)}")
pairs = (("loss", train, "epoch_loss"), ("accuracy", train, "epoch_accuracy"),
         ("val_loss", val, "epoch_loss"), ("val_accuracy", val, "epoch_accuracy"))
for key, ea, tag in pairs:
    h, ev = hist.get(key, []), [v for _, v in points(ea, tag)]
    check(len(h) == EPOCHS, f"history {key} has {len(h)} entries")
    check(len(h) == len(ev) and all(f32(a, b) for a, b in zip(h, ev)),
          f"history {key} {h} vs events {ev}")

if bad:
    print("FAILED:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"ok: {len(train.Tags()['scalars'])} train tags, 2 validation tags, {EPOCHS} epochs, "
      f"batch points at {want_steps}; history and summary agree")
PY
