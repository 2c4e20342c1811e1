#!/usr/bin/env bash
# The whole test suite (README command 2; .ci/run runs exactly this):
# 1. installs what is missing and builds with -Werror (CUDA backend compiled when nvcc is there),
# 2. runs every test (unit + integration with real processes),
# 3. runs the same suite again built with ASan + UBSan,
# 4. fuzzes psd's request path for a minute and the data readers for 30 s (libFuzzer, tests/fuzz/),
# and ends with one line "N passed, N failed, N skipped" counted from meson's results.
# The next tree builds while a tree's tests run (2 and 3 beside the sanitizer build, 3
# beside the fuzzing build), at the lowest CPU priority (nice 19): it takes the CPU
# time the tests leave idle (they wait on processes, timeouts and each other) and
# yields the rest to them.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
BUILD=build-test MESON_ARGS="-Dwerror=true" deploy/bootstrap.sh || exit 1

# bg_bootstrap VAR=VALUE...: deploy/bootstrap.sh with those variables, in the background
# at nice 19 (after build-test's bootstrap: only that one installs packages); its output
# is kept for bg_wait. Sets bg_pid and bg_log.
bg_bootstrap() {
    bg_log=$(mktemp)
    env "$@" nice -n 19 deploy/bootstrap.sh >"$bg_log" 2>&1 &
    bg_pid=$!
}
# bg_wait: waits for the background bootstrap, prints its output; exits 1 when it failed
bg_wait() {
    wait "$bg_pid"
    local rc=$?
    cat "$bg_log"
    rm -f "$bg_log"
    [ "$rc" -eq 0 ] || exit 1
}

# An OpenBLAS older than the CPU falls back to its SSE3 ("Prescott") kernels, several times
# slower (docs/TRAINING.md, "Devices"): where the CPU has AVX-512 or AVX2 + FMA, the suite
# runs with the kernels psworker's warning names (OPENBLAS_CORETYPE, as a user would set it).
# The tests check results, not speed; an OPENBLAS_CORETYPE already set is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x build-test/worker/psworker ]; then
    core=$(OPENBLAS_VERBOSE=2 build-test/worker/psworker --help 2>&1 | sed -n 's/^Core: //p' | head -1)
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
    case "$core" in
    Prescott | Core2 | Penryn | Dunnington | Nehalem | Atom | Sandybridge | Barcelona | Bobcat | Opteron*)
        if has avx512f avx512bw avx512dq avx512vl; then export OPENBLAS_CORETYPE=SkylakeX
        elif has avx2 fma; then export OPENBLAS_CORETYPE=Haswell; fi ;;
    esac
    [ -n "${OPENBLAS_CORETYPE:-}" ] &&
        echo "run-all: OpenBLAS chose $core kernels on this CPU: the suite runs with OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
fi

# Tests at a time (PS_TEST_JOBS, default 3 on 2 cores): many of them wait (on processes,
# sockets, timeouts) more than they compute, so a third slot fills the CPU they leave.
jobs=${PS_TEST_JOBS:-3}

# (the benchmarks, which no test runs, are built in build-test only)
bg_bootstrap BUILD=build-asan MESON_ARGS="-Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled -Dbuildtype=debug -Dbench=false"
meson test -C build-test --print-errorlogs --num-processes "$jobs" || status=1
bg_wait

# 4. fuzzing: psd's request path under libFuzzer (clang, ASan + UBSan) for 60 s
#    from the seed corpus (tests/fuzz/README.md)
#    Only the two fuzz targets are built there (the programs are the other trees').
#    The fuzzers run after the sanitizer tree's tests, alone: their time is wall time.
bg_bootstrap CC=clang BUILD=build-fuzz MESON_ARGS="-Dwerror=true -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled" \
    TARGETS="tests/fuzz/fuzz_request tests/fuzz/fuzz_data"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes "$jobs" || status=1
bg_wait
meson test -C build-fuzz --no-rebuild --print-errorlogs || status=1

python3 - build-test build-asan build-fuzz <<'PY'
import json, sys
passed = failed = skipped = 0
for d in sys.argv[1:]:
    with open(f"{d}/meson-logs/testlog.json") as f:
        for line in f:
            r = json.loads(line).get("result")
            if r in ("OK", "EXPECTEDFAIL"): passed += 1
            elif r == "SKIP": skipped += 1
            else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
if passed == 0: sys.exit(1)
PY
[ $? -eq 0 ] || status=1
exit $status
