#!/usr/bin/env bash
# Start a one-node Slurm cluster on this host, for CI (tests/test_slurm.py) and local trials.
#
#   .ci/slurm/start.sh DIR      # DIR: an empty (or absent) folder that holds every file it writes
#   export SLURM_CONF=DIR/slurm.conf   # then sinfo/sbatch/squeue talk to this cluster
#   .ci/slurm/stop.sh DIR       # stops exactly the daemons this script started (by pid)
#
# Needs root and Debian's `slurm-wlm` and `munge` (apt-get install -y slurm-wlm munge).
# Everything lives under DIR: a private munge key and socket (the host's munged, if any, is left
# alone), slurm.conf, spool and state folders, logs and the pid files `munged.pid`,
# `slurmctld.pid`, `slurmd.pid`. The one file outside DIR is the link /etc/slurm/slurm.conf ->
# DIR/slurm.conf (jobs' srun reads only the default path); it is made only where that path is
# free (exit 3 otherwise: the host's own Slurm, or another running cluster of this script) and
# stop.sh removes it. Accounting is off (no slurmdbd), so job status comes from squeue;
# MinJobAge=3600 keeps finished jobs visible to squeue for an hour.
# Ports: SPLITS_SLURMCTLD_PORT (default 6817) and SPLITS_SLURMD_PORT (default 6818).
set -euo pipefail

dir="${1:?usage: start.sh DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
chmod 0700 "$dir"

for tool in munged slurmctld slurmd sinfo scontrol; do
  command -v "$tool" >/dev/null || { echo "start.sh: '$tool' not found (apt-get install -y slurm-wlm munge)" >&2; exit 2; }
done
[ "$(id -u)" = "0" ] || { echo "start.sh: must run as root (slurmd runs jobs as their owner)" >&2; exit 2; }

# Jobs of snakemake-executor-plugin-slurm run `srun` with SLURM_* variables removed, so the
# client commands inside a job find the configuration only at its default path. Link it there
# when that path is free (stop.sh removes the link); never replace a host's own slurm.conf.
etc_conf=/etc/slurm/slurm.conf
mkdir -p "$(dirname "$etc_conf")"
if [ -L "$etc_conf" ] && [ -f "$(dirname "$(readlink "$etc_conf")")/.splits-ci" ]; then
  other="$(dirname "$(readlink "$etc_conf")")"
  other_pid="$(cat "$other/slurmctld.pid" 2>/dev/null || true)"
  if [ -n "$other_pid" ] && [ "$(cat "/proc/$other_pid/comm" 2>/dev/null)" = "slurmctld" ]; then
    echo "start.sh: another cluster of this script is running (state in $other)" >&2
    exit 3
  fi
  rm -f "$etc_conf" # a stale link left by an earlier run of this script
fi
if [ -L "$etc_conf" ] && [ ! -e "$etc_conf" ] && [ ! -d "$(dirname "$(readlink "$etc_conf")")" ]; then
  rm -f "$etc_conf" # a dangling link into a folder that no longer exists (a crashed earlier run)
fi
if [ -e "$etc_conf" ] || [ -L "$etc_conf" ]; then
  echo "start.sh: $etc_conf exists and is not ours; refusing to replace this host's Slurm configuration" >&2
  exit 3
fi
touch "$dir/.splits-ci"
ln -s "$dir/slurm.conf" "$etc_conf"
echo "$etc_conf" >"$dir/etc_link"

host="$(hostname -s)"
ctld_port="${SPLITS_SLURMCTLD_PORT:-6817}"
slurmd_port="${SPLITS_SLURMD_PORT:-6818}"
mkdir -p "$dir/munge" "$dir/spool/slurmd" "$dir/state" "$dir/log"
chmod 0700 "$dir/munge"

# --- munge: private key and socket -------------------------------------------------------------
if [ ! -s "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 0400 "$dir/munge/munge.key"
munged --force \
  --key-file="$dir/munge/munge.key" \
  --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" \
  --seed-file="$dir/munge/munged.seed" \
  --log-file="$dir/log/munged.log"
for _ in $(seq 50); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge/munge.socket" ] || { echo "start.sh: munged did not start, see $dir/log/munged.log" >&2; exit 1; }

# --- slurm.conf for this host ------------------------------------------------------------------
# The node line is what slurmd itself detects (CPUs, sockets, cores, RealMemory), minus 5% memory
# so the node is never marked down for having "less memory than configured".
node_line="$(slurmd -C | head -n 1)"
real_mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")"
node_line="$(sed "s/RealMemory=[0-9]*/RealMemory=$((real_mem * 95 / 100))/" <<<"$node_line")"

cat >"$dir/slurm.conf" <<CONF
# Written by .ci/slurm/start.sh: one node ($host), accounting off, squeue-based job status.
ClusterName=splitsci
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$node_line State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

export SLURM_CONF="$dir/slurm.conf"


# --- daemons -----------------------------------------------------------------------------------
# -i: ignore state left by an earlier run in DIR; both daemonize and write their pid files.
slurmctld -i -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

for _ in $(seq 120); do
  state="$(sinfo -h -n "$host" -o '%t' 2>/dev/null || true)"
  if [ "$state" = "idle" ]; then
    echo "slurm cluster up: SLURM_CONF=$SLURM_CONF (node $host idle)"
    exit 0
  fi
  sleep 0.5
done
echo "start.sh: node $host did not become idle (state '${state:-none}'); logs in $dir/log" >&2
exit 1
