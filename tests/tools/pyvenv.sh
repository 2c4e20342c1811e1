#!/usr/bin/env bash
# tests/tools/pyvenv.sh: a Python virtual environment for a test tool that Debian does not
# package (onnxruntime, tensorboard, safetensors), made on first use and reused after.
# Never the system Python; never a run-time dependency of the project.
#
# usage: pyvenv.sh NAME [--system-site-packages] PACKAGE==VERSION...
#   Prints the venv's python on stdout. The venv is $PS_TEST_VENV_DIR/NAME (default
#   /var/tmp/ps-test-venvs/NAME), made with Debian's /usr/bin/python3; with
#   --system-site-packages it also sees Debian's packages (numpy, torch, onnx). A venv whose
#   recorded package list differs is made again. Concurrent callers wait on a lock.
#   Exit 0 with the path; 77 (meson's "skip") when it cannot be made (no network to PyPI,
#   no python3-venv), with the reason on stderr; 1 on bad usage.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: pyvenv.sh NAME [--system-site-packages] PACKAGE==VERSION..." >&2; exit 1; }
name=$1
shift
site=
if [ "${1:-}" = --system-site-packages ]; then
    site=--system-site-packages
    shift
fi
base=${PS_TEST_VENV_DIR:-/var/tmp/ps-test-venvs}
dir=$base/$name
want="$site $*"
mkdir -p "$base" || { echo "pyvenv: cannot make $base" >&2; exit 77; }
exec 9>"$base/.$name.lock"
flock -w 900 9 || { echo "pyvenv: waited 900 s for $base/.$name.lock" >&2; exit 77; }
if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.ps-packages" 2>/dev/null)" = "$want" ]; then
    echo "$dir/bin/python"
    exit 0
fi
rm -rf "$dir"
if ! /usr/bin/python3 -m venv $site "$dir" >&2; then
    echo "pyvenv: /usr/bin/python3 -m venv failed (python3-venv missing?)" >&2
    rm -rf "$dir"
    exit 77
fi
if ! "$dir/bin/pip" install -q --disable-pip-version-check --timeout 60 "$@" >&2; then
    echo "pyvenv: pip install $* failed (no network to PyPI?)" >&2
    rm -rf "$dir"
    exit 77
fi
echo "$want" >"$dir/.ps-packages"
echo "$dir/bin/python"
