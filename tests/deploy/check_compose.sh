#!/usr/bin/env bash
# Checks deploy/docker/ where no Docker engine runs: lints the Dockerfile (stages, non-root
# user, packages against deploy/bootstrap.sh), checks prometheus.yml, and has docker-compose
# validate and render docker-compose.yml, whose services, volume, healthchecks, TF_CONFIGs
# and flags are then checked (the flags and TF_CONFIGs against the real psd and psworker
# when $PSD / $PSWORKER are set). Exit 0 ok, 1 a check failed, 77 (meson: skipped) when
# docker-compose is not installed and everything else passed.
set -uo pipefail

root=${PS_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
# the programs, if given, as absolute paths (the compose checks run in deploy/docker/)
for v in PSD PSWORKER; do
    [ -n "${!v:-}" ] && [ -e "${!v}" ] && printf -v "$v" '%s' "$(realpath "${!v}")"
done
dir=$root/deploy/docker
dockerfile=$dir/Dockerfile
compose=$dir/docker-compose.yml
failed=0
ok() { echo "ok: $*"; }
bad() {
    echo "FAIL: $*" >&2
    failed=1
}
# expect OK-MESSAGE FAIL-MESSAGE COMMAND...: runs COMMAND and reports which one holds
expect() {
    local yes=$1 no=$2
    shift 2
    if "$@"; then ok "$yes"; else bad "$no"; fi
}
# has ERE TEXT: TEXT has a line matching ERE (grep -iE)
has() { grep -qiE -- "$1" <<<"$2"; }
# shellcheck disable=SC2317 # called through expect
lacks() { ! has "$@"; }

for f in "$dockerfile" "$dir/Dockerfile.dockerignore" "$compose" "$dir/prometheus.yml"; do
    [ -f "$f" ] || { echo "FAIL: missing $f" >&2; exit 1; }
done

# ---- Dockerfile (no hadolint in Debian 12: plain checks) -----------------------------------

# instructions only, continuation lines joined, comments dropped
instructions=$(sed -e 's/#.*$//' "$dockerfile" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' | grep -v '^\s*$')
froms=$(grep -ciE '^\s*FROM\s' <<<"$instructions")
if [ "$froms" -eq 2 ]; then ok "Dockerfile has two stages"; else bad "Dockerfile has $froms FROM lines, want 2 (build + runtime)"; fi
expect "build stage is debian:bookworm-slim AS build" "first stage is not 'FROM debian:bookworm-slim AS build'" \
    has '^\s*FROM\s+debian:bookworm-slim\s+AS\s+build\s*$' "$instructions"
last_from=$(grep -iE '^\s*FROM\s' <<<"$instructions" | tail -1)
expect "runtime stage is debian:bookworm-slim" "runtime stage is '$last_from'" \
    has '^\s*FROM\s+debian:bookworm-slim\s*$' "$last_from"
expect "runtime stage copies from the build stage" "no COPY --from=build" \
    has '^\s*COPY\s+--from=build\s' "$instructions"
user=$(grep -iE '^\s*USER\s' <<<"$instructions" | tail -1 | awk '{print $2}')
case "$user" in
"") bad "no USER: the image would run as root" ;;
root | 0 | 0:* | root:*) bad "USER is $user" ;;
*) ok "runs as USER $user" ;;
esac
expect "no ENTRYPOINT" "ENTRYPOINT set (compose names each command)" \
    lacks '^\s*ENTRYPOINT\s' "$instructions"
for opt in -Dcuda=disabled -Dtests=false -Dbuildtype=release; do
    expect "meson setup $opt" "meson setup lacks $opt" has "meson setup .*$opt" "$instructions"
done
for bin in psd psworker psctl; do
    expect "installs $bin" "does not install $bin" has "/build/[a-z-]+/$bin\b" "$instructions"
done

# every folder the root meson.build enters (outside tests) is copied into the build stage
for sub in $(grep -oE "^\s*subdir\('[^']+'\)" "$root/meson.build" | sed -E "s/.*\('([^']+)'\)/\1/" \
        | grep -v '^tests'); do
    expect "build stage copies $sub/" "build stage does not COPY $sub/ (meson.build enters it)" \
        has "^\s*COPY\s+$sub/?\s" "$instructions"
done

# apt-get install lists of each stage
stage_pkgs() { # $1: 1 (build) or 2 (runtime)
    awk -v want="$1" 'toupper($1) == "FROM" { stage++ } stage == want' <<<"$instructions" \
        | grep -oE 'apt-get install [^&]*' | sed -e 's/apt-get install//' | tr ' ' '\n' \
        | grep -vE '^(-.*|)$' | sort -u
}
build_pkgs=$(stage_pkgs 1)
runtime_pkgs=$(stage_pkgs 2)
# deploy/bootstrap.sh's PKGS without the dataset, the deployment tools, the fuzzing compiler
# the man page viewers and strace (tests only), and numpy, torch and pytest (the Python
# package's and its tests'; venv, pip, onnx and Slurm: test tools; the image carries the C programs only)
bootstrap_pkgs=$(sed -n '/^PKGS=(/,/)/p' "$root/deploy/bootstrap.sh" | tr -d '()' | sed 's/PKGS=//' \
    | tr ' ' '\n' | grep -vE '^(dataset-.*|systemd|iproute2|curl|prometheus|docker-compose|clang|libclang-rt-.*|man-db|groff-base|strace|python3-numpy|python3-torch|python3-pytest|python3-venv|python3-pip|python3-onnx|slurmctld|slurmd|munge|slurm-client|)$' | sort -u)
if [ "$build_pkgs" = "$bootstrap_pkgs" ]; then
    ok "build stage installs bootstrap.sh's build packages"
else
    bad "build stage packages differ from bootstrap.sh's: $(diff <(echo "$bootstrap_pkgs") <(echo "$build_pkgs") | grep '^[<>]' | tr '\n' ' ')"
fi
for p in libuv1 libprotobuf-c1 libzmq5 libcjson1 zlib1g libsystemd0 curl dataset-fashion-mnist; do
    grep -qx "$p" <<<"$runtime_pkgs" || bad "runtime stage lacks $p"
done
grep -qxE 'libopenblas0(-pthread)?' <<<"$runtime_pkgs" || bad "runtime stage lacks libopenblas0-pthread"
dev=$(grep -E -- '-dev$' <<<"$runtime_pkgs" | tr '\n' ' ')
expect "runtime stage has no -dev packages" "runtime stage installs $dev" test -z "$dev"
# every package is one Debian has, when this machine has apt's lists
# (one apt-cache call: it takes ~0.4 s each)
# shellcheck disable=SC2086 # word splitting wanted: package lists
known=$(apt-cache policy libc6 $build_pkgs $runtime_pkgs 2>/dev/null \
    | awk '/^[^ ].*:$/ { name = $1; sub(/(:[a-z0-9]+)?:$/, "", name) } /Candidate: [0-9]/ { print name }' \
    | sort -u)
if has '^libc6$' "$known"; then
    unknown=$(comm -23 <(printf '%s\n' "$build_pkgs" "$runtime_pkgs" | sort -u) <(echo "$known") | tr '\n' ' ')
    expect "apt knows every package the Dockerfile installs" "apt knows no package $unknown" \
        test -z "$unknown"
else
    echo "note: no apt package lists here; package names not checked"
fi
for pat in .git 'build-*'; do
    grep -qxF -- "$pat" "$dir/Dockerfile.dockerignore" || bad "Dockerfile.dockerignore does not exclude $pat"
done

# ---- prometheus.yml ---------------------------------------------------------------------

if command -v promtool >/dev/null; then
    if out=$(promtool check config "$dir/prometheus.yml" 2>&1); then ok "promtool check config"; else bad "promtool: $out"; fi
else
    echo "note: promtool not installed (Debian package prometheus); prometheus.yml only grepped"
fi
for t in ps0:9100 ps1:9100; do
    expect "prometheus scrapes $t" "prometheus.yml does not scrape $t" grep -q "\"$t\"" "$dir/prometheus.yml"
done

# ---- docker-compose.yml -----------------------------------------------------------------

if ! command -v docker-compose >/dev/null; then
    if [ "$failed" -ne 0 ]; then exit 1; fi
    echo "SKIP: docker-compose not installed (Debian package docker-compose; deploy/bootstrap.sh installs it): docker-compose.yml not validated"
    exit 77
fi
cd "$dir" || exit 1
export PS_IMAGE=ps # the compose file's default, whatever this environment says
if err=$(docker-compose -f "$compose" config -q 2>&1); then
    ok "docker-compose config -q"
else
    bad "docker-compose config -q: $err"
    exit 1
fi
rendered=$(docker-compose -f "$compose" config 2>/dev/null)
echo "--- docker-compose config (first lines):"
head -n 12 <<<"$rendered"
echo "---"

if ! python3 -c 'import yaml' 2>/dev/null; then
    # docker-compose 1.x is Python and brings python3-yaml; a Go docker-compose may not
    echo "note: no python3-yaml: the rendered config is only grepped"
    for s in ps0 ps1 worker0 worker1 prometheus; do
        expect "service $s" "no service $s" has "^  $s:$" "$rendered"
    done
    expect "volume checkpoints" "no volume checkpoints" has '^  checkpoints:' "$rendered"
    n=$(grep -c 'http://localhost:9100/healthz' <<<"$rendered")
    expect "2 healthchecks" "$n healthchecks on /healthz, want 2" test "$n" -eq 2
    exit "$failed"
fi

# Prints "ok: ..." lines, "FAIL: ..." lines, and "RUN <tab> service <tab> TF_CONFIG <tab> argv..."
# lines for the flag checks below.
checks=$(RENDERED=$rendered python3 - "$dir/prometheus.yml" 2>&1 <<'PY'
import json, os, sys, yaml
cfg = yaml.safe_load(os.environ["RENDERED"])
prom = yaml.safe_load(open(sys.argv[1]))
def ok(m): print("ok: " + m)
def bad(m): print("FAIL: " + m)
svc = cfg.get("services", {})
want = {"ps0", "ps1", "worker0", "worker1", "prometheus"}
if set(svc) == want: ok("services: " + " ".join(sorted(svc)))
else: bad("services are %s, want %s" % (sorted(svc), sorted(want)))
if str(cfg.get("version", "")).startswith("2."): ok("file format %s (depends_on conditions)" % cfg["version"])
else: bad("file format %r: service_healthy needs 2.x" % cfg.get("version"))
if "checkpoints" in (cfg.get("volumes") or {}): ok("named volume checkpoints")
else: bad("no named volume checkpoints")
clusters = {}
def flag(cmd, name):
    return cmd[cmd.index(name) + 1] if name in cmd and cmd.index(name) + 1 < len(cmd) else None
for name in sorted(want & set(svc)):
    s = svc[name]
    if s.get("restart") == "on-failure": ok("%s: restart on-failure" % name)
    else: bad("%s: restart is %r" % (name, s.get("restart")))
    if name == "prometheus":
        if any(str(v).endswith(":/etc/prometheus/prometheus.yml:ro") for v in s.get("volumes", [])):
            ok("prometheus mounts prometheus.yml")
        else: bad("prometheus does not mount prometheus.yml")
        continue
    cmd = [str(a) for a in s.get("command") or []]
    try:
        tf = json.loads(s["environment"]["TF_CONFIG"])
    except Exception as e:
        bad("%s: TF_CONFIG: %s" % (name, e)); continue
    kind, idx = name.rstrip("0123456789"), int(name[-1])
    task = tf.get("task", {})
    if task.get("type") == kind and task.get("index") == idx: ok("%s: TF_CONFIG task %s/%d" % (name, kind, idx))
    else: bad("%s: TF_CONFIG task is %r" % (name, task))
    clusters[name] = json.dumps(tf.get("cluster"), sort_keys=True)
    if kind == "ps":
        hc = " ".join(str(a) for a in (s.get("healthcheck") or {}).get("test") or [])
        if "curl" in hc and "http://localhost:9100/healthz" in hc: ok("%s: healthcheck %s" % (name, hc))
        else: bad("%s: healthcheck is %r" % (name, hc))
        exp = {"--checkpoint-dir": "/var/lib/ps/ps-%d" % idx, "--metrics-port": "9100",
               "--workers": "2", "--mode": "sync"}
        for f, v in exp.items():
            if flag(cmd, f) != v: bad("%s: %s is %r, want %s" % (name, f, flag(cmd, f), v))
        if cmd[:1] != ["psd"]: bad("%s: command %r does not run psd" % (name, cmd))
        if not any(str(v).startswith("checkpoints:/var/lib/ps") for v in s.get("volumes", [])):
            bad("%s: checkpoints volume not mounted at /var/lib/ps" % name)
    else:
        if cmd[:1] != ["psworker"] or flag(cmd, "--epochs") != "2":
            bad("%s: command %r is not psworker --epochs 2" % (name, cmd))
        deps = s.get("depends_on") or {}
        if all(isinstance(deps, dict) and (deps.get(p) or {}).get("condition") == "service_healthy"
               for p in ("ps0", "ps1")):
            ok("%s: waits for ps0 and ps1 to be healthy" % name)
        else: bad("%s: depends_on is %r" % (name, deps))
    print("RUN\t%s\t%s\t%s" % (name, s["environment"]["TF_CONFIG"], "\t".join(cmd)))
if len(set(clusters.values())) == 1:
    cl = json.loads(next(iter(clusters.values())))
    if cl.get("ps") == ["ps0:2222", "ps1:2222"] and len(cl.get("worker", [])) == 2 and "chief" not in cl:
        ok("one cluster in every TF_CONFIG: %s (worker 0 is the chief)" % json.dumps(cl))
    else: bad("cluster %r: want ps0:2222, ps1:2222 and 2 workers" % cl)
    targets = sorted(t for j in prom.get("scrape_configs", []) for sc in j.get("static_configs", [])
                     for t in sc.get("targets", []))
    want_t = sorted(p.split(":")[0] + ":9100" for p in cl.get("ps", []))
    if targets == want_t: ok("prometheus targets = the ps services' metrics ports")
    else: bad("prometheus targets %r, want %r" % (targets, want_t))
else: bad("services disagree on TF_CONFIG's cluster: %r" % clusters)
PY
)
grep -v '^RUN' <<<"$checks"
grep -q '^FAIL' <<<"$checks" && failed=1
grep -qE '^(ok|FAIL|RUN)' <<<"$checks" || bad "rendered config not checked: $checks"

# The commands' flags and TF_CONFIGs as the programs parse them: `--help` after them exits 0
# only when everything before it is valid (psd also checks its TF_CONFIG).
while IFS=$'\t' read -r -a run; do
    [ "${run[0]}" = RUN ] || continue
    name=${run[1]} tf=${run[2]} prog=${run[3]}
    case "$prog" in psd) exe=${PSD:-} ;; psworker) exe=${PSWORKER:-} ;; *) exe= ;; esac
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "note: \$PSD/\$PSWORKER not set: $name's flags not tried"
        continue
    fi
    if out=$(TF_CONFIG=$tf "$exe" "${run[@]:4}" --help 2>&1 >/dev/null); then
        ok "$name: $prog accepts ${run[*]:4}"
    else
        bad "$name: $prog rejects its command or TF_CONFIG: $out"
    fi
done <<<"$checks"

exit "$failed"
