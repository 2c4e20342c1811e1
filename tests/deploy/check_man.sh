#!/usr/bin/env bash
# Renders each built man page (arguments: the roff files meson built from docs/man/*.scd)
# with `man -l` and fails when one does not render (non-zero exit, a groff warning, no
# NAME section), and checks that every flag the programs' --help lists ($PSD, $PSWORKER,
# $PSCTL and each psctl command) is documented in its page. Exit 0 ok, 1 a check failed.
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

# covers PAGE PROGRAM-ARGS...: every --flag in `PROGRAM --help` appears in PAGE's text
covers() {
    local page=$1 help missing=()
    shift
    [ -n "${text[$page]:-}" ] || { bad "$page: not given"; return; }
    help=$("$@" --help 2>&1) || { bad "$* --help failed"; return; }
    while read -r flag; do
        grep -qE -- "(^|[^a-z-])$flag([^a-z0-9-]|$)" <<<"${text[$page]}" || missing+=("$flag")
    done < <(grep -oE '^ +(-h, )?--[a-z0-9-]+' <<<"$help" | grep -oE -- '--[a-z0-9-]+')
    if ((${#missing[@]})); then bad "$page lacks $* flags: ${missing[*]}"; else echo "ok: $page covers $* --help"; fi
}
covers psd.8 "$PSD"
covers psworker.1 "$PSWORKER"
for cmd in local status checkpoint shutdown keygen slurm-task; do covers psctl.1 "$PSCTL" "$cmd"; done
for cmd in local status checkpoint shutdown keygen slurm-task; do
    grep -q "psctl $cmd" <<<"${text[psctl.1]:-}" || bad "psctl.1 lacks the command $cmd"
done
# libps(3): every function ps.h declares
hdr=${PS_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}/client/ps.h
for fn in $(grep -oE '^PS_API [^(]*\bps_[a-z0-9_]+\(' "$hdr" | grep -oE 'ps_[a-z0-9_]+\($' | tr -d '('); do
    grep -q -- "$fn" <<<"${text[libps.3]:-}" || bad "libps.3 lacks $fn"
done
exit $failed
