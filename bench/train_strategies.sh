#!/usr/bin/env bash
# bench/train_strategies.sh: training throughput (samples/s) of the default MLP
# (examples/mlp.json: 784-128-10, Adam, batch 64 per worker) on Fashion-MNIST in
# three setups with 2 workers, the same data, batch and epochs:
#   (m) psctl local --strategy mirrored --workers 2 (ring all-reduce, no psd)
#   (p) psctl local --ps 2 --workers 2 --mode sync (parameter server, sync)
#   (t) PyTorch DDP, gloo, 2 processes (bench/ddp_mlp.py, Debian's python3-torch)
# Each setup runs REPS times, interleaved (m p t, m p t, ...); the figure is the
# median of samples_per_sec (job-wide, training time only: psworker's summary,
# ddp_mlp.py's JSON line), with min and max; ratios of the medians.
#
# usage: bench/train_strategies.sh [BUILD_DIR] [REPS] [EPOCHS]
#   BUILD_DIR  the meson build with psctl, psworker, psd (default: build)
#   REPS       runs per setup (default 5)
#   EPOCHS     epochs per run (default 1)
# $PSWORKER / $PSD, when set, replace the build's.
# python3-torch is installed with apt-get when missing (never pip).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
reps=${2:-5}
epochs=${3:-1}
psctl="$build/psctl/psctl"
export PSWORKER="${PSWORKER:-$build/worker/psworker}" PSD="${PSD:-$build/ps-server/psd}"
py=/usr/bin/python3
for b in "$psctl" "$PSWORKER" "$PSD"; do
  [ -x "$b" ] || { echo "train_strategies: $b is not built (ninja -C $build)" >&2; exit 2; }
done
if ! "$py" -c 'import torch.distributed' 2>/dev/null; then
  echo "train_strategies: installing python3-torch (apt-get)" >&2
  apt-get install -y -q python3-torch >&2
fi

work=$(mktemp -d /tmp/ps-bench-strategies.XXXXXX)
echo "command: $0 $build $reps $epochs"
echo "runs (summaries and logs in $work):"
echo "  (m) $psctl local --strategy mirrored --workers 2 --epochs $epochs --summary FILE -- --progress none"
echo "  (p) $psctl local --ps 2 --workers 2 --mode sync --epochs $epochs --summary FILE -- --progress none"
echo "  (t) $py $here/ddp_mlp.py --procs 2 --epochs $epochs --batch 64"

# Prints samples_per_sec of a summary JSON file.
rate() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_sec"])' "$1"; }

declare -A runs
for ((r = 1; r <= reps; r++)); do
  s="$work/m$r.json"
  "$psctl" local --strategy mirrored --workers 2 --epochs "$epochs" --summary "$s" \
    -- --progress none >"$work/m$r.log" 2>&1 || { echo "(m) run $r failed: $work/m$r.log" >&2; exit 1; }
  m=$(rate "$s")
  s="$work/p$r.json"
  "$psctl" local --ps 2 --workers 2 --mode sync --epochs "$epochs" --summary "$s" \
    -- --progress none >"$work/p$r.log" 2>&1 || { echo "(p) run $r failed: $work/p$r.log" >&2; exit 1; }
  p=$(rate "$s")
  "$py" "$here/ddp_mlp.py" --procs 2 --epochs "$epochs" --batch 64 >"$work/t$r.json" 2>"$work/t$r.log" ||
    { echo "(t) run $r failed: $work/t$r.log" >&2; exit 1; }
  t=$(rate "$work/t$r.json")
  runs[m]+="$m " runs[p]+="$p " runs[t]+="$t "
  printf 'run %d: m %.0f  p %.0f  t %.0f samples/s\n' "$r" "$m" "$p" "$t" >&2
done

"$py" - "${runs[m]}" "${runs[p]}" "${runs[t]}" "$reps" <<'EOF'
import statistics, sys
m, p, t = ([float(v) for v in a.split()] for a in sys.argv[1:4])
reps = sys.argv[4]
print(f"timing: samples_per_sec, job-wide, training time only; {reps} runs per setup, "
      "median; min/max over runs; setups interleaved (m p t, m p t, ...)\n")
print(f"{'setup':40s} {'samples/s':>10s} {'min':>10s} {'max':>10s}")
names = {"m": "(m) mirrored, 2 workers (ring)", "p": "(p) parameter server sync, 2 psd x 2 w",
         "t": "(t) PyTorch DDP gloo, 2 processes"}
med = {}
for k, v in (("m", m), ("p", p), ("t", t)):
    med[k] = statistics.median(v)
    print(f"{names[k]:40s} {med[k]:10.0f} {min(v):10.0f} {max(v):10.0f}")
rp, rt = med["m"] / med["p"], med["m"] / med["t"]
print("\nTargets (printed, not asserted):")
print(f"  (m) >= 1.2 x (p): {rp:.2f} x  {'met' if rp >= 1.2 else 'NOT met'}")
print(f"  (m) >= 3 x (t):   {rt:.2f} x  {'met' if rt >= 3 else 'NOT met'}")
EOF
