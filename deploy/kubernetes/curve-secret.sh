#!/bin/sh
# Makes the CurveZMQ keys of a job and prints them as the Secret psd.yaml and psworker.yaml
# mount (ps-curve), for `kubectl apply -f -`:
#   deploy/kubernetes/curve-secret.sh | kubectl apply -f -
# Three key pairs from `psctl keygen`: server (every psd shard), worker (every worker) and
# admin (psctl status|checkpoint|shutdown), each as NAME.key (key pair: secret) and NAME.pub.
# The keys exist only in a temporary directory, removed at exit, and on stdout: do not
# commit the output. Options: --name NAME (the Secret's name, default ps-curve), --psctl PATH
# (default: $PSCTL, else psctl on PATH). Exit 0 printed, 1 psctl failed, 2 bad usage.
set -eu
name=ps-curve
psctl=${PSCTL:-psctl}
usage() {
    echo "usage: curve-secret.sh [--name NAME] [--psctl PATH]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --name) [ $# -ge 2 ] || usage; name=$2; shift 2 ;;
    --psctl) [ $# -ge 2 ] || usage; psctl=$2; shift 2 ;;
    -h | --help)
        sed -n '2,9s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *) usage ;;
    esac
done
case $name in '' | -* | *[!a-z0-9.-]*) echo "curve-secret.sh: --name '$name' is not a valid Secret name" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pair in server worker admin; do
    if ! "$psctl" keygen "$pair" --dir "$tmp" >/dev/null; then
        echo "curve-secret.sh: $psctl keygen $pair failed" >&2
        exit 1
    fi
done
printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: ps\ntype: Opaque\ndata:\n' "$name"
for f in admin.key admin.pub server.key server.pub worker.key worker.pub; do
    printf '  %s: %s\n' "$f" "$(base64 -w 0 <"$tmp/$f")"
done
