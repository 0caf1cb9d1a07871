#!/usr/bin/env bash
# Start a real single-node Slurm (slurmctld, slurmd, munged) on this machine, for the Slurm tests.
# Idempotent: installs the Debian packages if missing, writes the config, starts what is not
# running, and waits until the node is idle. Needs root and apt. Prints "slurm: ready" on success.
set -euo pipefail
# shellcheck source=scripts/slurm-settings.sh
source "$(dirname "$0")/slurm-settings.sh"
slurm_install
host=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown munge:munge /run/munge
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=hpcdist
SlurmctldHost=${host}(127.0.0.1)
$(slurm_settings)
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
NodeName=${host} NodeAddr=127.0.0.1 CPUs=16 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
# By PID file, not by name: scripts/twonode.sh runs daemons of the same names for its own cluster.
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
running /run/slurmctld.pid || /usr/sbin/slurmctld
running /run/slurmd.pid || /usr/sbin/slurmd -N "$host"
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  case "$state" in
    idle*|mixed*|allocated*) echo "slurm: ready ($host $state)"; exit 0 ;;
    down*|drain*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
echo "slurm: node did not become idle (state: ${state:-unknown})" >&2
exit 1
