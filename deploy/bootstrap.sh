#!/usr/bin/env bash
# Installs the Debian packages the project needs (when missing; needs root)
# and builds it with meson into $BUILD (default: build). Extra meson setup
# arguments come from $MESON_ARGS; $TARGETS (default: everything) names the
# ninja targets to build.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(gcc libc6-dev meson ninja-build pkg-config python3 libuv1-dev libprotobuf-c-dev protobuf-c-compiler
      libzmq3-dev check libopenblas-dev libcjson-dev zlib1g-dev libhdf5-dev libzip-dev libjpeg62-turbo-dev libpng-dev dataset-fashion-mnist
      libsystemd-dev systemd iproute2 scdoc man-db groff-base curl strace prometheus docker-compose clang libclang-rt-14-dev
      python3-numpy python3-torch python3-pytest python3-venv python3-pip python3-onnx
      slurmctld slurmd munge slurm-client)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing packages: ${missing[*]}" >&2
        echo "bootstrap: run as root, or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "bootstrap: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD=${BUILD:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f "$BUILD/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$BUILD" ${MESON_ARGS:-} >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
# shellcheck disable=SC2086
ninja -C "$BUILD" ${TARGETS:-} >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
echo "bootstrap: built into $BUILD/"
