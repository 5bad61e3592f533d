#!/usr/bin/env bash
# Stop the daemons that .ci/slurm/start.sh DIR started, by the pids it recorded in DIR
# (slurmd, then slurmctld, then munged), and wait for them to exit. Other processes with the
# same names (a host's own munged or Slurm) are never touched. Also removes the
# /etc/slurm/slurm.conf link start.sh made.
#
#   .ci/slurm/stop.sh DIR
set -uo pipefail

dir="${1:?usage: stop.sh DIR}"
status=0
for daemon in slurmd slurmctld munged; do
  pidfile="$dir/$daemon.pid"
  [ -s "$pidfile" ] || continue
  pid="$(tr -dc '0-9' <"$pidfile")"
  [ -n "$pid" ] || continue
  # only signal the pid if it still is the daemon we started
  if [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$daemon" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop.sh: $daemon (pid $pid) ignored SIGTERM, sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      status=1
    fi
  fi
  rm -f "$pidfile"
done
# the /etc/slurm/slurm.conf link start.sh made, if it still points into DIR
if [ -s "$dir/etc_link" ]; then
  link="$(cat "$dir/etc_link")"
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$dir/slurm.conf" ]; then
    rm -f "$link"
  fi
  rm -f "$dir/etc_link"
fi
exit "$status"
