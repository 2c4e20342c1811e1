#!/usr/bin/env bash
# tests/tools/fetch_movielens.sh: MovieLens 100K for the tests, as RecBole ships it in its
# wheel (recbole/dataset_example/ml-100k/: ml-100k.inter, tab separated, the header
# "user_id:token item_id:token rating:float timestamp:float", 100,000 ratings).
#
# usage: fetch_movielens.sh
#   Prints the path of ml-100k.inter on stdout. The wheel is fetched once with
#   `python3 -m pip download --no-deps recbole==1.2.1` into $PS_TEST_DATA_CACHE (default
#   /var/tmp/ps-test-data) and only that folder is taken out of it, into CACHE/ml-100k/; a
#   copy already there with its 100,000 rows is reused. Concurrent callers wait on a lock.
#   Exit 0 with the path; 77 (meson's "skip") when it cannot be had (no pip, PyPI not
#   answering within the time limits), with the reason on stderr; 1 when what came is not
#   what is expected.
set -uo pipefail
cache=${PS_TEST_DATA_CACHE:-/var/tmp/ps-test-data}
python=${PYTHON:-python3}
version=1.2.1
rows=100000
dest=$cache/ml-100k
inter=$dest/ml-100k.inter
header=$'user_id:token\titem_id:token\trating:float\ttimestamp:float'

complete() { # the file is there, with its header and every row
    [ -f "$inter" ] && [ "$(head -1 "$inter")" = "$header" ] &&
        [ "$(wc -l <"$inter")" -eq $((rows + 1)) ]
}

mkdir -p "$cache" || { echo "fetch_movielens: cannot make $cache" >&2; exit 77; }
exec 9>"$cache/.ml-100k.lock"
flock -w 600 9 || { echo "fetch_movielens: waited 600 s for $cache/.ml-100k.lock" >&2; exit 77; }
if complete; then
    echo "$inter"
    exit 0
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "fetch_movielens: no pip for $python" >&2
    exit 77
fi
wheels=$cache/wheels
mkdir -p "$wheels" || exit 77
wheel=$(ls "$wheels"/recbole-$version-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
    # bounded: 30 s per connection, one retry, 5 minutes in all
    if ! timeout 300 "$python" -m pip download -q --disable-pip-version-check --no-deps \
        --timeout 30 --retries 1 -d "$wheels" "recbole==$version" >&2; then
        echo "fetch_movielens: pip download recbole==$version failed (no network to PyPI?)" >&2
        exit 77
    fi
    wheel=$(ls "$wheels"/recbole-$version-*.whl 2>/dev/null | head -1)
    [ -n "$wheel" ] || { echo "fetch_movielens: pip left no recbole wheel in $wheels" >&2; exit 1; }
fi
tmp=$(mktemp -d "$cache/.ml-100k.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# only the one folder, every member's name checked to stay inside it
if ! "$python" - "$wheel" "$tmp" <<'PY'; then
import os, sys, zipfile
prefix = "recbole/dataset_example/ml-100k/"
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit("no %s in %s" % (prefix, sys.argv[1]))
    for n in names:
        rel = n[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit("odd member name: %s" % n)
        out = os.path.join(sys.argv[2], rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(n) as src, open(out, "wb") as dst:
            dst.write(src.read())
PY
    echo "fetch_movielens: cannot take ml-100k out of $wheel" >&2
    exit 1
fi
chmod 755 "$tmp" && rm -rf "$dest" && mv "$tmp" "$dest" || exit 1
if ! complete; then
    echo "fetch_movielens: $inter is not the 100,000 ratings expected" \
        "($(wc -l <"$inter" 2>/dev/null || echo no) lines)" >&2
    exit 1
fi
echo "$inter"
