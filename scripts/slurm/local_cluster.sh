#!/bin/bash
# A real two-node Slurm cluster on this one machine, for running the sbatch scripts on a CPU
# (tests/test_slurm.py, docs/slurm.md): one slurmctld and two slurmd (node1, node2, both on
# 127.0.0.1 with their own ports), with a private munged for authentication. Everything lives in
# one folder; nothing outside it is written, and `down` stops exactly the processes `up` started
# (by the PIDs they wrote), never anything else.
#
#   scripts/slurm/local_cluster.sh up       # start (installs Debian's slurm-wlm and munge if
#                                           # missing, as root); prints `export SLURM_CONF=...`
#   scripts/slurm/local_cluster.sh status   # sinfo, and which daemons are alive
#   scripts/slurm/local_cluster.sh down     # stop what `up` started, remove the folder
#
# Then, in the shell that submits:  export SLURM_CONF=$LOCAL_SLURM_DIR/slurm.conf
#
# Settings (environment):
#   LOCAL_SLURM_DIR    the cluster's folder (default: /tmp/recipes-slurm-$UID)
#   LOCAL_SLURM_PORT   first of the three ports: slurmctld, node1's slurmd, node2's (default 16817)
#   LOCAL_SLURM_CPUS   CPUs each node declares (default: this machine's count). Both nodes share
#                      the same cores and memory (each declares all of it): a job on both gets
#                      twice what the machine has.
#
# The nodes' address is 127.0.0.1, which the sbatch scripts refuse as a Ray head address unless
# told it is intended: jobs on this cluster run with RECIPES_LOCAL_CLUSTER=1 (written into the
# cluster's environment file, `source $LOCAL_SLURM_DIR/env`).
set -euo pipefail

DIR=${LOCAL_SLURM_DIR:-/tmp/recipes-slurm-$(id -u)}
PORT=${LOCAL_SLURM_PORT:-16817}
CPUS=${LOCAL_SLURM_CPUS:-$(nproc)}
MEM_MB=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) / 1024))
NODES=(node1 node2)

say() { printf '[local_cluster] %s\n' "$*" >&2; }
die() {
    printf '[local_cluster] ERROR: %s\n' "$*" >&2
    exit 2
}

install_packages() {
    local missing=()
    for cmd in slurmctld slurmd sbatch munged; do
        command -v "$cmd" >/dev/null 2>&1 || [[ -x /usr/sbin/$cmd ]] || missing+=("$cmd")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        die "${missing[*]} not installed: run 'sudo apt-get install slurm-wlm munge' (Debian/Ubuntu) and retry"
    fi
    say "installing slurm-wlm and munge (missing: ${missing[*]})"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >"$DIR/apt.log" 2>&1 || {
        apt-get update -qq >>"$DIR/apt.log" 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >>"$DIR/apt.log" 2>&1
    } || die "apt-get install slurm-wlm munge failed: see $DIR/apt.log"
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_config() {
    local user
    user=$(id -un)
    mkdir -p "$DIR/state" "$DIR/log" "$DIR/munge"
    for node in "${NODES[@]}"; do mkdir -p "$DIR/spool/$node"; done
    cat >"$DIR/slurm.conf" <<EOF
# written by scripts/slurm/local_cluster.sh: two nodes on 127.0.0.1, state under $DIR
ClusterName=recipes-local
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
KillWait=30
InactiveLimit=0
MinJobAge=300
NodeName=node1 NodeHostname=$(uname -n) NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
NodeName=node2 NodeHostname=$(uname -n) NodeAddr=127.0.0.1 Port=$((PORT + 2)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=local Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/env" <<EOF
export SLURM_CONF=$DIR/slurm.conf
export RECIPES_LOCAL_CLUSTER=1
EOF
}

up() {
    mkdir -p "$DIR"
    install_packages
    if alive "$DIR/slurmctld.pid"; then
        say "already up ($DIR)"
        wait_idle
        return
    fi
    write_config
    export SLURM_CONF=$DIR/slurm.conf
    if ! alive "$DIR/munge/munged.pid"; then
        [[ -f $DIR/munge/munge.key ]] || { dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none; }
        chmod 700 "$DIR/munge" && chmod 400 "$DIR/munge/munge.key"
        /usr/sbin/munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
            --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
            --seed-file="$DIR/munge/munged.seed" || die "munged did not start: see $DIR/log/munged.log"
    fi
    /usr/sbin/slurmctld -f "$DIR/slurm.conf" -i || die "slurmctld did not start: see $DIR/log/slurmctld.log"
    for node in "${NODES[@]}"; do
        /usr/sbin/slurmd -f "$DIR/slurm.conf" -N "$node" || die "slurmd -N $node did not start: see $DIR/log/slurmd-$node.log"
    done
    wait_idle
    say "up: 2 nodes idle; export SLURM_CONF=$DIR/slurm.conf RECIPES_LOCAL_CLUSTER=1 (or: source $DIR/env)"
    echo "export SLURM_CONF=$DIR/slurm.conf RECIPES_LOCAL_CLUSTER=1"
}

wait_idle() {
    export SLURM_CONF=$DIR/slurm.conf
    local deadline=$((SECONDS + 60)) states=""
    while ((SECONDS < deadline)); do
        states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | tr '\n' ' ') || states=""
        [[ $states == "node1 idle node2 idle " ]] && return 0
        sleep 0.5
    done
    die "the nodes are not idle after 60 s (sinfo: '${states}'): see $DIR/log/"
}

down() {
    [[ -d $DIR ]] || {
        say "nothing to stop ($DIR does not exist)"
        return 0
    }
    local pids=() f
    for f in "$DIR"/slurmd-*.pid "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
        alive "$f" && pids+=("$(cat "$f")")
    done
    ((${#pids[@]} == 0)) || kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 20)) pid
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$DIR"
    say "down: stopped ${#pids[@]} daemon(s), removed $DIR"
}

status() {
    local f name
    for f in "$DIR/munge/munged.pid" "$DIR/slurmctld.pid" "$DIR"/slurmd-*.pid; do
        name=$(basename "$f" .pid)
        if alive "$f"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: not running"; fi
    done
    [[ -f $DIR/slurm.conf ]] && SLURM_CONF=$DIR/slurm.conf sinfo -N 2>/dev/null || true
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    *) die "usage: $0 up|down|status" ;;
esac
