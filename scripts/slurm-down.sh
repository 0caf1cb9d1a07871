#!/usr/bin/env bash
# Stop the local Slurm started by scripts/slurm-up.sh (slurmd, slurmctld, munged).
set -u
for daemon in slurmd slurmctld; do
  pkill -x "$daemon" 2>/dev/null || true
done
pkill -x munged 2>/dev/null || true
for _ in $(seq 20); do
  pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || { echo "slurm: stopped"; exit 0; }
  sleep 0.5
done
echo "slurm: daemons still running" >&2
exit 1
