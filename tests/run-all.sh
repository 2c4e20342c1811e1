#!/usr/bin/env bash
# The whole test suite (README command 2; .ci/run runs exactly this):
# 1. installs what is missing and builds with -Werror (CUDA backend compiled when nvcc is there),
# 2. runs every test (unit + integration with real processes),
# 3. runs the same suite again built with ASan + UBSan,
# 4. fuzzes psd's request path for a minute (libFuzzer, tests/fuzz/),
# and ends with one line "N passed, N failed, N skipped" counted from meson's results.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
BUILD=build-test MESON_ARGS="-Dwerror=true" deploy/bootstrap.sh || exit 1
meson test -C build-test --print-errorlogs --num-processes 2 || status=1

BUILD=build-asan MESON_ARGS="-Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled -Dbuildtype=debug" \
    deploy/bootstrap.sh || exit 1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 || status=1

# 4. fuzzing: psd's request path under libFuzzer (clang, ASan + UBSan) for 60 s
#    from the seed corpus (tests/fuzz/README.md)
CC=clang BUILD=build-fuzz MESON_ARGS="-Dwerror=true -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled" \
    deploy/bootstrap.sh || exit 1
meson test -C build-fuzz --print-errorlogs || status=1

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
