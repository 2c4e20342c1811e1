#!/bin/sh
# bench/allreduce.sh BUILD_DIR [bench/allreduce flags]: runs the ring all-reduce
# benchmark beside PyTorch's gloo (bench/gloo_allreduce.py). Needs a Python with
# torch: Debian's python3-torch, installed here (apt-get) only when missing; if
# that fails, the ring's figures are printed without gloo's.
set -u
build=${1:?usage: allreduce.sh BUILD_DIR [flags]}
shift
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! "$py" -c 'import torch.distributed' 2>/dev/null; then
    echo "allreduce.sh: no torch for $py: apt-get install -y python3-torch" >&2
    if ! { apt-get install -y python3-torch >&2 && "$py" -c 'import torch.distributed'; }; then
        echo "allreduce.sh: python3-torch could not be installed: ring figures only" >&2
        exec "$build/bench/allreduce" "$@"
    fi
fi
exec "$build/bench/allreduce" --gloo "$here/gloo_allreduce.py" --python "$py" "$@"
