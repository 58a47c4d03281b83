#!/usr/bin/env bash
# A one-node SLURM cluster on this machine for the tests (Debian's slurmctld, slurmd and munge packages):
# CPUs from the machine (2 on the test machine), no cgroups (proctrack/linuxproc, task/none), no accounting, every
# daemon run as the calling user (root in CI). Partition "debug" (default) takes the jobs; a job in partition
# "urgent" preempts them, and preemption cancels them (PreemptMode=CANCEL, as on clusters that do not requeue).
# Everything it writes stays in DIR: the config, the munge key and socket, the daemons' state, logs and pid files;
# no system file is edited.
# Usage: bash tests/slurm_cluster.sh start DIR    starts the daemons, waits until the node takes jobs, prints
#                                                 "export SLURM_CONF=DIR/slurm.conf" (sbatch, squeue, ... read it)
#        bash tests/slurm_cluster.sh stop DIR     stops the daemons started in DIR (by their pid files)
set -euo pipefail

die() {
    echo "error: $*" >&2
    exit 1
}

[ $# -eq 2 ] || die "usage: bash tests/slurm_cluster.sh start|stop DIR"
ACTION=$1
DIR=$(mkdir -p "$2" && cd "$2" && pwd)
CONF="$DIR/slurm.conf"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
    local daemon pid
    for daemon in slurmd slurmctld munged; do
        [ -f "$DIR/$daemon.pid" ] || continue
        pid=$(cat "$DIR/$daemon.pid")
        if kill "$pid" 2>/dev/null; then
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$DIR/$daemon.pid"
    done
}

write_config() {
    local node cpus user
    node=$(hostname -s)
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone stops at OMP_NUM_THREADS
    user=$(id -un)
    mkdir -p "$DIR/state" "$DIR/spool"
    cat >"$CONF" <<EOF
ClusterName=petrtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=120
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
}

start() {
    for bin in munged mungekey slurmctld slurmd sbatch sinfo; do
        command -v "$bin" >/dev/null || die "$bin not found: apt-get install slurmctld slurmd slurm-client munge"
    done
    stop
    write_config
    rm -f "$DIR/munge.key"
    mungekey --create --keyfile "$DIR/munge.key"
    chmod 600 "$DIR/munge.key"
    munged --force --key-file "$DIR/munge.key" --socket "$DIR/munge.sock" --pid-file "$DIR/munged.pid" \
        --log-file "$DIR/munged.log" --seed-file "$DIR/munged.seed"
    export SLURM_CONF="$CONF"
    slurmctld -f "$CONF"
    slurmd -f "$CONF" -N "$(hostname -s)"
    local deadline=$((SECONDS + 900))  # a hang guard only: the node is up in seconds, later on a loaded machine
    while [ "$SECONDS" -lt "$deadline" ]; do
        if sinfo -h -o "%t" 2>/dev/null | grep -qx "idle"; then
            echo "export SLURM_CONF=$CONF"
            return
        fi
        sleep 0.2
    done
    stop
    die "the SLURM node did not come up within 15 min; see $DIR/slurmctld.log and $DIR/slurmd.log"
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    *) die "usage: bash tests/slurm_cluster.sh start|stop DIR" ;;
esac
