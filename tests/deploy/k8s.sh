#!/usr/bin/env bash
# Validates deploy/kubernetes/ offline: tests/deploy/k8s.py with kubernetes-validate (the
# Kubernetes JSON schemas bundled in the package) in a venv from PyPI (tests/tools/pyvenv.sh).
# No cluster is needed or contacted. Exit 0 ok, 1 a check failed, 77 (meson: skipped) when
# the venv cannot be made (no PyPI).
set -uo pipefail
root=${PS_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
py=$("$root/tests/tools/pyvenv.sh" k8s kubernetes-validate==1.37.0)
rc=$?
[ $rc = 0 ] || exit $rc
PS_SOURCE_ROOT=$root exec "$py" "$root/tests/deploy/k8s.py"
