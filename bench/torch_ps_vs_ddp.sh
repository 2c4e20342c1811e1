#!/usr/bin/env bash
# bench/torch_ps_vs_ddp.sh: training throughput (samples/s) of the default MLP
# (784-128-10, Adam 0.001, batch 64 per process) on Fashion-MNIST written in PyTorch,
# two ways, with 2 processes x 1 thread, the same model, data, batch, sharding, epochs:
#   (s) PyTorch + psd: bench/torch_ps_mlp.py (ps.torch.DistributedOptimizer), 2 workers
#       and 2 psd shards (--mode sync), started here on free 127.0.0.1 ports, each
#       worker's TF_CONFIG set here;
#   (d) PyTorch DDP, gloo: bench/ddp_mlp.py --procs 2.
# Each setup runs REPS times, interleaved (s d, d s, s d, ...); the figure is the
# median of samples_per_sec (job-wide, training time only: the chief's JSON line,
# ddp_mlp.py's), with min and max, and the ratio of the medians (target: s >= 1.5 x d).
# For (s) the chief's split of a step (data, forward+backward, exchange) is shown too.
#
# usage: bench/torch_ps_vs_ddp.sh [BUILD_DIR] [REPS] [EPOCHS]
#   BUILD_DIR  the meson build with ps-server/psd and client/libps.so.0 (default: build)
#   REPS       runs per setup (default 3)
#   EPOCHS     epochs per run (default 1)
# $PSD replaces the build's psd, $PS_LIBRARY its libps. Every psd and worker started
# here is stopped on exit; every wait is bounded (psd listening: 15 s; a run: 900 s).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
build=${1:-build}
reps=${2:-3}
epochs=${3:-1}
case "$reps$epochs" in *[!0-9]*) echo "torch_ps_vs_ddp: REPS and EPOCHS are integers" >&2; exit 2 ;; esac
[ "$reps" -ge 1 ] && [ "$epochs" -ge 1 ] || { echo "torch_ps_vs_ddp: REPS and EPOCHS must be >= 1" >&2; exit 2; }
psd="${PSD:-$build/ps-server/psd}"
lib="$build/client/libps.so.0"
py=/usr/bin/python3
for f in "$psd" "$lib"; do
  [ -e "$f" ] || { echo "torch_ps_vs_ddp: $f is not built (ninja -C $build)" >&2; exit 2; }
done
if ! "$py" -c 'import torch.distributed, numpy' 2>/dev/null; then
  echo "torch_ps_vs_ddp: installing python3-torch (apt-get)" >&2
  apt-get install -y -q python3-torch python3-numpy >&2
fi
export PS_LIBRARY="${PS_LIBRARY:-$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")}"
export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}"

work=$(mktemp -d /tmp/ps-bench-torch.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Starts 2 psd shards (sync, 2 workers) for run $1; sets eps to their endpoints.
start_shards() {
  local r=$1 i ep
  eps=()
  for i in 0 1; do
    "$psd" --bind 127.0.0.1 --port 0 --ready-file "$work/s$r.ready$i" --shard $i \
      --num-shards 2 --workers 2 --mode sync --log-level warn >"$work/s$r.psd$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    for _ in $(seq 1500); do
      [ -s "$work/s$r.ready$i" ] && break
      kill -0 "${pids[$i]}" 2>/dev/null || { echo "psd $i exited: $work/s$r.psd$i.log" >&2; exit 1; }
      sleep 0.01
    done
    ep=$(cat "$work/s$r.ready$i" 2>/dev/null || true)
    [ -n "$ep" ] || { echo "psd $i did not listen within 15 s: $work/s$r.psd$i.log" >&2; exit 1; }
    eps+=("$ep")
  done
}

run_ps() {
  local r=$1 i rc=0 w=()
  start_shards "$r"
  for i in 0 1; do
    TF_CONFIG="{\"cluster\": {\"ps\": [\"${eps[0]}\", \"${eps[1]}\"],
      \"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      timeout 900 "$py" "$here/torch_ps_mlp.py" --epochs "$epochs" --batch 64 \
      >"$work/s$r.w$i.json" 2>"$work/s$r.w$i.log" &
    w+=($!)
    pids+=($!)
  done
  for i in 0 1; do wait "${w[$i]}" || rc=$?; done
  cleanup
  [ "$rc" -eq 0 ] || { echo "(s) run $r failed ($rc): $work/s$r.w*.log" >&2; exit 1; }
}

run_ddp() {
  local r=$1 rc=0
  # in the background so that a signal to this script is handled at once (the trap)
  timeout 900 "$py" "$here/ddp_mlp.py" --procs 2 --epochs "$epochs" --batch 64 \
    >"$work/d$r.json" 2>"$work/d$r.log" &
  pids+=($!)
  wait $! || rc=$?
  pids=()
  [ "$rc" -eq 0 ] || { echo "(d) run $r failed ($rc): $work/d$r.log" >&2; exit 1; }
}

echo "command: $0 $build $reps $epochs"
echo "runs (JSON lines and logs in $work):"
echo "  (s) 2 x psd --mode sync --workers 2; 2 x TF_CONFIG=... $py $here/torch_ps_mlp.py --epochs $epochs --batch 64"
echo "  (d) $py $here/ddp_mlp.py --procs 2 --epochs $epochs --batch 64"
for ((r = 1; r <= reps; r++)); do
  if ((r % 2)); then run_ps "$r"; run_ddp "$r"; else run_ddp "$r"; run_ps "$r"; fi
  "$py" - "$work/s$r.w0.json" "$work/d$r.json" "$r" <<'EOF' >&2
import json, sys
s, d = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3])
m = s["ms_per_step"]
print(f"run {sys.argv[3]}: s {s['samples_per_sec']:.0f} (acc {s['test_accuracy']:.3f}; ms/step "
      f"{m['total']:.3f}: data {m['data']:.3f}, fwd+bwd {m['fwd_bwd']:.3f}, exchange "
      f"{m['exchange']:.3f})  d {d['samples_per_sec']:.0f} (acc {d['test_accuracy']:.3f}) samples/s")
EOF
done

"$py" - "$work" "$reps" <<'EOF'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
def line(f):
    return json.loads(open(f).read().strip().splitlines()[-1])
s = [line(f"{work}/s{r}.w0.json") for r in range(1, reps + 1)]
d = [line(f"{work}/d{r}.json") for r in range(1, reps + 1)]
print(f"timing: samples_per_sec, job-wide, training time only; {reps} runs per setup, median; "
      "min/max over runs; setups interleaved (s d, d s, ...)\n")
print(f"{'setup':46s} {'samples/s':>10s} {'min':>10s} {'max':>10s} {'test acc':>9s}")
names = {"s": "(s) PyTorch + psd sync, 2 psd x 2 workers", "d": "(d) PyTorch DDP gloo, 2 processes"}
med = {}
for k, runs in (("s", s), ("d", d)):
    v = [x["samples_per_sec"] for x in runs]
    med[k] = statistics.median(v)
    acc = statistics.median(x["test_accuracy"] for x in runs)
    print(f"{names[k]:46s} {med[k]:10.0f} {min(v):10.0f} {max(v):10.0f} {acc:9.3f}")
print("\n(s) chief's step, ms (median over runs):")
for part in ("total", "data", "fwd_bwd", "exchange"):
    print(f"  {part:9s} {statistics.median(x['ms_per_step'][part] for x in s):7.3f}")
ratio = med["s"] / med["d"]
print("\nTarget (printed, not asserted):")
print(f"  (s) >= 1.5 x (d): {ratio:.2f} x  {'met' if ratio >= 1.5 else 'NOT met'}")
EOF
