#!/usr/bin/env bash
# How long a sync job stalls when a worker is killed and not restarted: 2 psd shards
# and 3 psworkers (the MLP, batch 32, sync, --worker-timeout 30000), worker 2 killed
# with SIGKILL once the job is past step 200. A poller reads shard 0's version (its
# /metrics, every 5 ms) and prints, side by side:
#   - the median and the longest gap between two versions before the kill (the step time),
#   - the longest gap in the 2 s after the kill, counted from the SIGKILL (the stall),
#     and the median gap then (two workers: the step time after),
#   - when the shards logged the removal, and that --worker-timeout (30 s) was not waited.
# RUNS=N repeats it (default 3). usage: bench/elastic_stall.sh [BUILD]
# Needs Debian's dataset-fashion-mnist. Benchmarks never run in the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,10p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
runs=${RUNS:-3}
for f in "$build/ps-server/psd" "$build/worker/psworker"; do
    [ -x "$f" ] || { echo "elastic_stall: $f is not built" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-stall.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "sync MLP, 2 shards x 3 workers, worker 2 killed (SIGKILL, no restart) after step 200"
for run in $(seq 1 "$runs"); do
    pids=()
    mport=$(free_port)
    eps=""
    for s in 0 1; do
        extra=()
        [ "$s" = 0 ] && extra=(--metrics-port "$mport" --metrics-bind 127.0.0.1)
        "$build/ps-server/psd" --port 0 --bind 127.0.0.1 --shard $s --num-shards 2 --workers 3 \
            --mode sync --worker-timeout 30000 --ready-file "$tmp/ready-$s" "${extra[@]}" \
            >"$tmp/psd-$s.log" 2>&1 &
        pids+=($!)
    done
    for s in 0 1; do
        for _ in $(seq 100); do [ -s "$tmp/ready-$s" ] && break; sleep 0.05; done
        eps+="${eps:+,}$(cat "$tmp/ready-$s")"
    done
    for w in 0 1 2; do
        "$build/worker/psworker" --ps "$eps" --index $w --workers 3 --epochs 2 --batch 32 \
            --model "$root/examples/mlp_sgd.json" --progress none --timeout 120 \
            >"$tmp/w$w.log" 2>&1 &
        pids+=($!)
        disown $! # the kill below is the point: no "Killed" line from the shell
    done
    victim=${pids[4]}
    python3 - "$mport" "$victim" "$tmp/gaps" <<'PY'
import os, signal, statistics, sys, time, urllib.request
port, victim, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def version():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("psd_version{"):
                    return int(float(line.split()[-1]))
    except OSError:
        return None
last, last_t, before, after, killed_at = None, None, [], [], None
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    v, t = version(), time.monotonic()
    if v is None:
        time.sleep(0.005); continue
    if last is not None and v != last:
        gap = t - (killed_at if killed_at and last_t < killed_at else last_t)
        if killed_at is None:
            if v > 20:  # not the job's start
                before.append(t - last_t)
        else:
            after.append(gap)
            if t - killed_at > 2.0:
                break
    if v != last:
        last, last_t = v, t
    if killed_at is None and v >= 200:
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
    time.sleep(0.005)
with open(out, "w") as f:
    f.write(f"{statistics.median(before)*1e3:.1f} {max(before)*1e3:.1f} "
            f"{max(after)*1e3 if after else float('nan'):.1f} "
            f"{statistics.median(after)*1e3 if after else float('nan'):.1f}\n")
PY
    read -r med worst stall med_after <"$tmp/gaps"
    removal=$(grep -h -m1 -o "worker 2 removed: [A-Za-z ]*" "$tmp"/psd-*.log | head -1)
    printf "  run %d: step gap before the kill: median %s ms, longest %s ms; in the 2 s after it:\n" \
        "$run" "$med" "$worst"
    printf "         longest %s ms (the stall, from the SIGKILL), median %s ms; shards: %s\n" \
        "$stall" "$med_after" "${removal:-no removal logged}"
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -f "$tmp"/ready-*
done
