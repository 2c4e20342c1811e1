#!/usr/bin/env bash
# The custom-loop test (issue 13; the Python package: issue 15): `meson install` the build (argument 1) into a temporary
# DESTDIR, build examples/custom_loop from the installed tree with its Makefile, which
# uses nothing but `pkg-config --cflags --libs ps` (PKG_CONFIG_PATH and
# PKG_CONFIG_SYSROOT_DIR point into the DESTDIR), start 2 psd shards (sync, the build's
# $PSD, free ports from --port 0 and --ready-file), run the example as 2 worker processes
# and check worker 0's test accuracy >= $MIN_ACC (0.80) within $DEADLINE seconds. Under
# the sanitizer build (PS_SANITIZED=1) the example is built with the same sanitizers
# (libps is instrumented; LeakSanitizer then checks the example and libps at exit): 3
# epochs take about 8 s there (2 cores). Exit 0 ok, 1 failed.
set -uo pipefail

build=$(realpath "$1")
min_acc=${MIN_ACC:-0.80}
deadline=${DEADLINE:-60}
epochs=3
extra_cflags=
if [ "${PS_SANITIZED:-0}" = 1 ]; then
    extra_cflags="-fsanitize=address,undefined -fno-omit-frame-pointer"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-custom-loop.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
    echo "FAIL: $*" >&2
    for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    exit 1
}
now() { date +%s.%N; }
t0=$(now)

# 1. install into a DESTDIR (the build is up to date: meson test built it)
dest=$tmp/root
DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    fail "meson install into DESTDIR failed"
pc=$(find "$dest" -name ps.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no ps.pc installed"
src=$(find "$dest" -type d -path '*/examples/custom_loop' | head -1)
[ -n "$src" ] || fail "examples/custom_loop not installed"
for page in man8/psd.8 man1/psworker.1 man1/psctl.1 man3/libps.3; do
    [ -n "$(find "$dest" -path "*/man/$page")" ] || fail "man page $page not installed"
done
[ -n "$(find "$dest" -name 'psd@.service')" ] || fail "psd@.service not installed"
echo "ok: installed into DESTDIR ($(find "$dest" -type f | wc -l) files)"
# the Python package: installed into Debian's dist-packages, naming the installed libps
# (only in the plain build: an ASan libps cannot load into an uninstrumented Python)
if [ "${PS_SANITIZED:-0}" != 1 ] && [ -x /usr/bin/python3 ]; then
    pkg=$(find "$dest" -type d -path '*/dist-packages/ps' | head -1)
    [ -n "$pkg" ] || fail "the ps Python package is not installed into a dist-packages"
    want=$(sed -n 's/^LIBPS = "\(.*\)"$/\1/p' "$pkg/_install_paths.py")
    [ -f "$dest$want" ] || fail "the ps package's _install_paths.py names $want, not installed"
    PYTHONPATH=$(dirname "$pkg") PS_LIBRARY=$dest$want /usr/bin/python3 -c \
        'import ps, ps.errors; assert ps.Client and ps.Worker; print(ps.optimizer_spec("adam").lr)' \
        >"$tmp/py.log" 2>&1 || fail "the installed ps package does not import"
    echo "ok: the installed ps package imports (libps $want)"
fi

# 2. build the example from the installed copy, with pkg-config pointed into the DESTDIR
cp -r "$src" "$tmp/custom_loop"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_LIBDIR=
make -C "$tmp/custom_loop" CFLAGS="-O2 $extra_cflags" >"$tmp/make.log" 2>&1 ||
    fail "building examples/custom_loop with pkg-config failed"
libdir=$(dirname "$(find "$dest" -name 'libps.so*' | head -1)")
export LD_LIBRARY_PATH=$libdir
# the example must run on the installed libps, not the build tree's
ldd "$tmp/custom_loop/custom_loop" | grep "$libdir/libps.so" >/dev/null || fail "custom_loop does not load the installed libps"
echo "ok: built custom_loop with $(pkg-config --cflags --libs ps)"

# 3. two psd shards, sync, on free ports
for i in 0 1; do
    "$PSD" --port 0 --bind 127.0.0.1 --shard $i --num-shards 2 --workers 2 --mode sync \
        --ready-file "$tmp/ready$i" --log-level warn >"$tmp/psd$i.log" 2>&1 &
    pids+=($!)
done
for _ in $(seq 200); do
    [ -s "$tmp/ready0" ] && [ -s "$tmp/ready1" ] && break
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a psd exited at start"; done
    sleep 0.05
done
if ! [ -s "$tmp/ready0" ] || ! [ -s "$tmp/ready1" ]; then fail "the psd shards did not become ready in 10 s"; fi
ps_list=$(cat "$tmp/ready0"),$(cat "$tmp/ready1")

# 4. the example as 2 workers (worker 0 creates the variables and reports the accuracy)
t1=$(now)
w=()
for i in 0 1; do
    timeout "$deadline" "$tmp/custom_loop/custom_loop" --ps "$ps_list" --worker $i --workers 2 \
        --epochs $epochs --timeout 30000 >"$tmp/worker$i.log" 2>&1 &
    w+=($!)
    pids+=($!)
done
for i in 0 1; do wait "${w[$i]}" || fail "worker $i exited $? (124: past the ${deadline} s deadline)"; done
t2=$(now)
acc=$(sed -n 's/^test_accuracy=\([0-9.]*\).*/\1/p' "$tmp/worker0.log")
[ -n "$acc" ] || fail "worker 0 printed no test_accuracy"
echo "custom_loop: 2 workers, 2 shards, sync, $epochs epoch(s): $(grep '^test_accuracy' "$tmp/worker0.log");" \
    "training wall $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.1f", b-a}') s, whole test $(awk -v a="$t0" -v b="$t2" 'BEGIN{printf "%.1f", b-a}') s"
awk -v a="$acc" -v m="$min_acc" 'BEGIN{exit !(a >= m)}' || fail "test accuracy $acc < $min_acc"
echo "ok: test accuracy $acc >= $min_acc"
