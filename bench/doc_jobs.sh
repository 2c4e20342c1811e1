#!/usr/bin/env bash
# The jobs README.md and docs/ quote a figure for, run exactly as those pages write them:
# prints one row per job (test accuracy, samples/s, wall seconds) and the build and
# machine they ran on. docs/PERFORMANCE.md, "The documented jobs", holds the output; every
# accuracy or samples/s figure in the other pages links there.
#
#   bench/doc_jobs.sh [BUILD_DIR] [JOB...]     (default: build, every job)
#
# Jobs: mlp_sync (README command 1), mlp_async, mlp_mirrored, fashion_cnn, binary,
# torch_fmnist (Debian's /usr/bin/python3 with python3-torch), custom_loop (libps from C). The sync and
# all-reduce jobs are deterministic for a seed: their accuracy is the same on every run and
# machine with the same build; samples/s depends on the machine and what else it runs. Not a
# test: the suite never runs it.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ -x "$build/psctl/psctl" ] || { echo "doc_jobs: no $build/psctl/psctl: build first (deploy/bootstrap.sh)" >&2; exit 2; }
build=$(realpath "$build")
psctl=$build/psctl/psctl
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-doc-jobs.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# summary FILE KEY: a number from a summary JSON
summary() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
row() { printf '%-14s %9s %11s %8s   %s\n' "$@"; }

# psctl_job NAME ARGS...: a psctl local job with --summary
psctl_job() {
    local name=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    if ! "$psctl" local "$@" --summary "$tmp/$name.json" >"$tmp/$name.log" 2>&1; then
        row "$name" failed - - "psctl local $*"
        tail -5 "$tmp/$name.log" >&2
        return
    fi
    t1=$(date +%s.%N)
    row "$name" "$(printf '%.4f' "$(summary "$tmp/$name.json" test_accuracy)")" \
        "$(printf '%.0f' "$(summary "$tmp/$name.json" samples_per_sec)")" \
        "$(printf '%.1f' "$(awk "BEGIN{print $t1 - $t0}")")" "psctl local $*"
}

torch_fmnist() {
    local t0 t1 acc cmd='/usr/bin/python3 examples/python/torch_fmnist.py --epochs 2'
    t0=$(date +%s.%N)
    PYTHONPATH=$PWD/python PS_LIBRARY=$build/client/libps.so.0 \
        "$psctl" local --ps 2 --workers 2 --mode sync --worker-cmd "$cmd" >"$tmp/torch.log" 2>&1 ||
        { row torch_fmnist failed - - "--worker-cmd '$cmd'"; tail -5 "$tmp/torch.log" >&2; return; }
    t1=$(date +%s.%N)
    acc=$(grep -oE 'test accuracy: [0-9.]+' "$tmp/torch.log" | tail -1 | grep -oE '[0-9.]+$')
    row torch_fmnist "${acc:-?}" - "$(printf '%.1f' "$(awk "BEGIN{print $t1 - $t0}")")" \
        "psctl local --ps 2 --workers 2 --mode sync --worker-cmd '$cmd'"
}

# custom_loop: examples/custom_loop/custom_loop.c built against this build's libps
# (its uninstalled pkg-config file), 2 sync psd shards, 2 workers, 3 epochs.
custom_loop() {
    local t0 t1 acc ps=() i
    PKG_CONFIG_PATH=$build/meson-uninstalled cc -std=c17 -O2 -o "$tmp/custom_loop" \
        examples/custom_loop/custom_loop.c $(PKG_CONFIG_PATH=$build/meson-uninstalled \
        pkg-config --cflags --libs ps-uninstalled) -Wl,-rpath,"$build/client" -lm ||
        { row custom_loop failed - - "cc examples/custom_loop/custom_loop.c"; return; }
    for i in 0 1; do
        "$build/ps-server/psd" --port 0 --shard $i --num-shards 2 --workers 2 \
            --ready-file "$tmp/ready$i" >"$tmp/psd$i.log" 2>&1 &
        pids+=($!)
    done
    for i in 0 1; do
        for _ in $(seq 100); do [ -s "$tmp/ready$i" ] && break; sleep 0.1; done
        ps+=("$(cat "$tmp/ready$i")")
    done
    t0=$(date +%s.%N)
    "$tmp/custom_loop" --ps "${ps[0]},${ps[1]}" --worker 1 --workers 2 >"$tmp/cl1.log" 2>&1 &
    pids+=($!)
    "$tmp/custom_loop" --ps "${ps[0]},${ps[1]}" --worker 0 --workers 2 >"$tmp/cl0.log" 2>&1
    t1=$(date +%s.%N)
    acc=$(grep -oE 'test_accuracy=[0-9.]+' "$tmp/cl0.log" | grep -oE '[0-9.]+$')
    row custom_loop "${acc:-?}" - "$(printf '%.1f' "$(awk "BEGIN{print $t1 - $t0}")")" \
        "custom_loop.c, 2 psd (sync), 2 workers, 3 epochs"
}

jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(mlp_sync mlp_async mlp_mirrored fashion_cnn binary torch_fmnist custom_loop)
echo "# bench/doc_jobs.sh $build, $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# build: $(meson introspect --buildoptions "$build" 2>/dev/null | python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print("buildtype", o["buildtype"], "sanitize", o["b_sanitize"])')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
row job accuracy samples/s wall_s command
for j in "${jobs[@]}"; do
    case $j in
    mlp_sync) psctl_job mlp_sync --ps 2 --workers 2 --mode sync --epochs 2 ;;
    mlp_async) psctl_job mlp_async --ps 2 --workers 2 --mode async --epochs 2 ;;
    mlp_mirrored) psctl_job mlp_mirrored --strategy mirrored --workers 2 --epochs 2 ;;
    fashion_cnn) psctl_job fashion_cnn --ps 2 --workers 2 --mode sync --model examples/fashion_cnn.json --epochs 2 ;;
    binary) psctl_job binary --ps 1 --workers 2 --mode sync --model examples/binary_classifier.json ;;
    torch_fmnist) torch_fmnist ;;
    custom_loop) custom_loop ;;
    *) echo "doc_jobs: unknown job $j" >&2; exit 2 ;;
    esac
done
