#!/usr/bin/env bash
# Renders each built man page (arguments: the roff files meson built from docs/man/) with
# `man -l` and fails when one does not render (non-zero exit, a groff warning, no NAME
# section); checks the pages of $PSD, $PSWORKER and $PSCTL against their --help (each
# flag, default and exit status, both ways: check_man_flags.py) and that libps.3 covers
# every function of client/ps.h. Exit 0 ok, 1 a check failed.
set -uo pipefail

failed=0
bad() {
    echo "FAIL: $*" >&2
    failed=1
}
declare -A text
for page in "$@"; do
    name=$(basename "$page")
    err=$(mktemp)
    out=$(MANWIDTH=80 man -l --warnings=all "$page" 2>"$err")
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$err" ]; then
        bad "$name: man -l exited $rc: $(cat "$err")"
    elif ! grep -q '^NAME' <<<"$out" || [ "$(wc -l <<<"$out")" -lt 20 ]; then
        bad "$name: rendered without a NAME section or nearly empty"
    else
        echo "ok: $name renders ($(wc -l <<<"$out") lines)"
    fi
    rm -f "$err"
    text[$name]=$out
done

# psd, psworker and every psctl command: the flags, defaults and exit statuses of --help
# against the page's OPTIONS and EXIT STATUS (check_man_flags.py says how)
python3 "$(dirname "$0")/check_man_flags.py" "$@" || failed=1
# every command `psctl --help` lists is named in psctl(1)
cmds=$("$PSCTL" --help | sed -n '/^commands:/,/^$/p' | grep -oE '^  [a-z-]+' | tr -d ' ')
[ -n "$cmds" ] || bad "psctl --help lists no commands"
for cmd in $cmds; do
    grep -q "psctl $cmd" <<<"${text[psctl.1]:-}" || bad "psctl.1 lacks the command $cmd"
done
# libps(3): every function ps.h declares
hdr=${PS_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}/client/ps.h
for fn in $(grep -oE '^PS_API [^(]*\bps_[a-z0-9_]+\(' "$hdr" | grep -oE 'ps_[a-z0-9_]+\($' | tr -d '('); do
    grep -q -- "$fn" <<<"${text[libps.3]:-}" || bad "libps.3 lacks $fn"
done
exit $failed
