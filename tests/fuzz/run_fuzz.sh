#!/usr/bin/env bash
# Runs a libFuzzer target on a temp copy of a seed corpus, so the checked-in
# corpus is never modified. Crash, leak and timeout inputs go to ARTIFACT_DIR.
# usage: run_fuzz.sh TARGET CORPUS_DIR ARTIFACT_DIR [libFuzzer flags...]
set -euo pipefail
target=$1 corpus=$2 artifacts=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/psd-fuzz-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$corpus"/* "$work"/
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
# libFuzzer's own error exit code is 77, which meson reads as "skipped": a crash
# must fail the test, so it exits 1 instead
"$target" -error_exitcode=1 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" "$work" || status=$?
echo "run_fuzz: corpus $(ls "$corpus" | wc -l) -> $(ls "$work" | wc -l) inputs; exit $status"
exit $status
