#!/usr/bin/env bash
# The Slurm test (issue 19): a real Slurm on this machine, in a temporary directory (munged,
# slurmctld and slurmd as root, each with its own socket, ports chosen free, state and logs
# there), then deploy/slurm/ps.sbatch as 2 psd + 2 workers (4 tasks on the one node) training
# examples/mlp.json on Fashion-MNIST for 1 epoch: the chief's summary test accuracy must be
# >= $MIN_ACC (0.80) and both shards must have written a checkpoint. The same job again with
# the same CKPT_DIR (what a requeued job does) must restore both shards' checkpoints: the
# chief resumes after epoch 1, trains no step, and reports the first run's accuracy. Then
# deploy/slurm/allreduce.sbatch as 2 workers (multi_worker_mirrored) for 1 epoch: accuracy
# >= $MIN_ACC and a chief checkpoint in its CKPT_DIR. Every job, daemon and file is removed
# at the end, also on failure.
# Exit 0 ok, 1 failed, 77 skipped (no Slurm or munge installed, not root, no data set).
set -uo pipefail

src=${PS_SOURCE_ROOT:?PS_SOURCE_ROOT (the source tree) is required}
psctl=${PSCTL:?PSCTL (the built psctl) is required}
min_acc=${MIN_ACC:-0.80}
job_timeout=${JOB_TIMEOUT:-600}
data=/usr/share/datasets/fashion-mnist

skip() { echo "SKIP: $*"; exit 77; }
for b in munged slurmctld slurmd sbatch sinfo scancel squeue; do
    command -v "$b" >/dev/null 2>&1 ||
        skip "$b is not installed (Debian: apt-get install slurmctld slurmd munge slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "the test Slurm runs its daemons as root (SlurmUser=root)"
[ -d "$data" ] || skip "no Fashion-MNIST at $data (Debian: dataset-fashion-mnist)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-slurm.XXXXXX")
chmod 700 "$tmp"
daemons=()
export SLURM_CONF=$tmp/slurm.conf
cleanup() {
    if [ -f "$SLURM_CONF" ] && ((${#daemons[@]})); then
        scancel --quiet --full "--name=$name_prefix" 2>/dev/null
        scancel --quiet -u root 2>/dev/null
    fi
    for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${daemons[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
name_prefix=ps-slurm-test
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
    echo "FAIL: $*" >&2
    for f in "$tmp"/*.log "$tmp"/*.out; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -25 "$f" >&2; }
    done
    exit 1
}
now() { date +%s; }

# ports free right now on 127.0.0.1: $1 consecutive ones, the first printed
free_ports() {
    /usr/bin/python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 60000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
sys.exit(1)
PY
}

# 1. munged with its own key, socket, pid, log and seed files
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
munged -F -f --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
    --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munged.log" \
    --seed-file="$tmp/munge/munged.seed" &
daemons+=($!)
t0=$(now)
until [ -S "$tmp/munge/munge.sock" ]; do
    kill -0 "${daemons[0]}" 2>/dev/null || fail "munged exited"
    (($(now) - t0 < 30)) || fail "munged made no socket in 30 s"
    sleep 0.1
done

# 2. slurm.conf: one node (this host, at 127.0.0.1), free ports, everything under $tmp
ctld_port=$(free_ports 1) || fail "no free port"
d_port=$(free_ports 1) || fail "no free port"
[ "$ctld_port" != "$d_port" ] || d_port=$((ctld_port + 1))
host=$(hostname -s)
cpus=$(slurmd -C 2>/dev/null | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
cat >"$SLURM_CONF" <<CONF
ClusterName=pstest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
SwitchType=switch/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=${cpus:-2} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
daemons+=($!)
t0=$(now)
until sinfo -h -o '%t' 2>/dev/null | grep -qx idle; do
    for p in "${daemons[@]}"; do kill -0 "$p" 2>/dev/null || fail "a Slurm daemon exited"; done
    (($(now) - t0 < 60)) || fail "the node is not idle after 60 s: $(sinfo 2>&1)"
    sleep 0.5
done
echo "slurm: node $host idle after $(($(now) - t0)) s (slurmctld :$ctld_port, slurmd :$d_port)"

# 3. a job: sbatch --wait, bounded; $1 script, $2 tasks, $3 name, then NAME=VALUE exports
run_job() {
    local script=$1 tasks=$2 name=$3
    shift 3
    local base
    base=$(free_ports "$tasks") || fail "no $tasks free ports"
    local exports
    exports="ALL,PS_BIN=$(dirname "$psctl"),MODEL=$src/examples/mlp.json,EPOCHS=1"
    exports+=",BASE_PORT=$base,SUMMARY=$tmp/$name.json"
    for kv in "$@"; do exports+=",$kv"; done
    # --overcommit: 4 tasks on a node of 2 CPUs
    timeout "$job_timeout" sbatch --wait --quiet --overcommit --ntasks="$tasks" \
        --job-name="$name_prefix" --chdir="$tmp" --output="$tmp/$name.out" \
        --export="$exports" "$src/deploy/slurm/$script" ||
        fail "$script ($name) failed (rc $?)"
}
accuracy() {
    /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_accuracy"])' "$1" ||
        fail "no summary $1"
}
check_acc() {
    local acc
    acc=$(accuracy "$tmp/$1.json")
    awk -v a="$acc" -v m="$min_acc" 'BEGIN{exit !(a >= m)}' || fail "$1: test accuracy $acc < $min_acc"
    echo "ok: $1: test accuracy $acc >= $min_acc"
}

# 4. parameter server: 2 psd + 2 workers, then the same job again on its checkpoints
t0=$(now)
run_job ps.sbatch 4 ps1 NUM_PS=2 CKPT_DIR="$tmp/ckpt-ps"
check_acc ps1
for s in 0 1; do
    ls "$tmp/ckpt-ps/ps-$s"/ckpt-*.pstf >/dev/null 2>&1 || fail "shard $s wrote no checkpoint"
done
grep -q "task 0 is psd shard 0" "$tmp/ps1.out" || fail "task 0 was not psd shard 0"
grep -q "task 2 is worker 0" "$tmp/ps1.out" || fail "task 2 was not the chief"
echo "ok: ps job in $(($(now) - t0)) s, both shards checkpointed"
t0=$(now)
run_job ps.sbatch 4 ps2 NUM_PS=2 CKPT_DIR="$tmp/ckpt-ps"
for s in 0 1; do
    grep -q "psd\[$s\] info: restored checkpoint $tmp/ckpt-ps/ps-$s/" "$tmp/ps2.out" ||
        fail "the second run's shard $s did not restore its checkpoint"
done
steps1=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$tmp/ps1.json")
# the shards hold the end of epoch 1: the chief joins at epoch 2 and trains no step
grep -q "chief info: joining a running job: epoch 2, step 0 of $steps1" "$tmp/ps2.out" ||
    fail "the second run's chief did not resume after epoch 1 ($steps1 steps)"
steps2=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$tmp/ps2.json")
[ "$steps2" = 0 ] || fail "the second run trained $steps2 steps again"
check_acc ps2
[ "$(accuracy "$tmp/ps2.json")" = "$(accuracy "$tmp/ps1.json")" ] ||
    fail "the second run's accuracy differs from the first's: not the restored variables"
echo "ok: the same job again restored both shards at step $steps1 in $(($(now) - t0)) s"

# 5. all-reduce: 2 workers, no psd
t0=$(now)
run_job allreduce.sbatch 2 ar CKPT_DIR="$tmp/ckpt-ar"
check_acc ar
ls "$tmp/ckpt-ar"/* >/dev/null 2>&1 || fail "the all-reduce chief wrote no checkpoint"
grep -q "strategy.*multi_worker_mirrored\|multi_worker_mirrored" "$tmp/ar.json" ||
    fail "the all-reduce job's summary names no multi_worker_mirrored"
echo "ok: all-reduce job in $(($(now) - t0)) s"
echo "slurm: 3 jobs passed"
