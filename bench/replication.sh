#!/usr/bin/env bash
# What replicated shards cost, and how long a job stalls when a primary dies:
# the MLP (batch 32, sync), 2 shards x 2 workers, side by side in one run:
#   R=1       every shard one psd (the baseline),
#   R=2       every shard a primary and a backup (psd --replicas 2, --lease-ms 400),
#   R=2 kill  the same, shard 0's primary killed (SIGKILL) once the job is past step 200.
# A poller reads shard 1's version (its /metrics, every 5 ms; in a sync job a stall of
# one shard stalls them all) and prints the median gap between two versions (the step
# time) of steps 20-400 before any kill, the ratio to R=1, and for the kill the longest
# gap in the 3 s after it, counted from the SIGKILL (the workers' stall: the backup
# waits out 1.5 leases, then takes over; the workers find it and retry).
# RUNS=N repeats it (default 3). usage: bench/replication.sh [BUILD]
# Needs Debian's dataset-fashion-mnist. Benchmarks never run in the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,13p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
runs=${RUNS:-3}
for f in "$build/ps-server/psd" "$build/worker/psworker"; do
    [ -x "$f" ] || { echo "replication: $f is not built" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench-repl.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# one_job R KILL: starts the shards and workers; leaves "median stall" in $tmp/gaps
one_job() {
    local R=$1 kill=$2 eps="" victim=0
    pids=()
    local mport
    mport=$(free_port)
    for s in 0 1; do
        local ports=() peers=""
        for r in $(seq 0 $((R - 1))); do ports+=("$(free_port)"); done
        for r in $(seq 0 $((R - 1))); do peers+="${peers:+,}127.0.0.1:${ports[$r]}"; done
        for r in $(seq 0 $((R - 1))); do
            local extra=()
            [ "$s" = 1 ] && [ "$r" = 0 ] && extra+=(--metrics-port "$mport" --metrics-bind 127.0.0.1)
            [ "$R" -gt 1 ] && extra+=(--replicas "$R" --replica "$r" --peers "$peers" --lease-ms 400)
            "$build/ps-server/psd" --port "${ports[$r]}" --bind 127.0.0.1 --shard $s \
                --num-shards 2 --workers 2 --mode sync --ready-file "$tmp/ready-$s-$r" \
                "${extra[@]}" >"$tmp/psd-$s-$r.log" 2>&1 &
            pids+=($!)
            disown $!
            [ "$s" = 0 ] && [ "$r" = 0 ] && victim=$!
        done
        eps+="${eps:+,}$(IFS='|'; p=(); for x in "${ports[@]}"; do p+=("127.0.0.1:$x"); done; echo "${p[*]}")"
    done
    for f in "$tmp"/ready-*; do :; done
    for _ in $(seq 200); do
        [ "$(ls "$tmp"/ready-* 2>/dev/null | wc -l)" -ge $((2 * R)) ] && break
        sleep 0.05
    done
    for w in 0 1; do
        "$build/worker/psworker" --ps "$eps" --index $w --workers 2 --epochs 2 --batch 32 \
            --model "$root/examples/mlp_sgd.json" --progress none --timeout 120 \
            >"$tmp/w$w.log" 2>&1 &
        pids+=($!)
        disown $!
    done
    python3 - "$mport" "$victim" "$kill" "$tmp/gaps" <<'PY'
import os, signal, statistics, sys, time, urllib.request
port, victim, kill, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
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
        if killed_at is None:
            if 20 < v <= 400:
                before.append(t - last_t)
            if v > 400 and not kill:
                break
        else:
            after.append(t - (killed_at if last_t < killed_at else last_t))
            if t - killed_at > 3.0:
                break
    if v != last:
        last, last_t = v, t
    if kill and killed_at is None and v >= 200:
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
    time.sleep(0.005)
with open(out, "w") as f:
    f.write(f"{statistics.median(before)*1e3 if before else float('nan'):.2f} "
            f"{max(after)*1e3 if after else float('nan'):.0f}\n")
PY
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -f "$tmp"/ready-*
}

echo "sync MLP (batch 32), 2 shards x 2 workers; median step time of steps 20-400 (ms)"
for run in $(seq 1 "$runs"); do
    one_job 1 0; read -r base _ <"$tmp/gaps"
    one_job 2 0; read -r repl _ <"$tmp/gaps"
    one_job 2 1; read -r _ stall <"$tmp/gaps"
    took=$(grep -h -m1 -o "took over as the primary[^:]*" "$tmp"/psd-0-1.log 2>/dev/null)
    ratio=$(python3 -c "print(f'{$repl/$base:.2f}')" 2>/dev/null || echo nan)
    printf "  run %d: R=1 %s ms, R=2 %s ms (x%s); R=2 with shard 0's primary killed: stall %s ms (%s)\n" \
        "$run" "$base" "$repl" "$ratio" "$stall" "${took:-no take-over logged}"
done
