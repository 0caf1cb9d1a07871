#!/usr/bin/env bash
# Stop the local Slurm started by scripts/slurm-up.sh (slurmd, slurmctld, munged), by their PID
# files: the daemons of the same names that scripts/twonode.sh runs for its cluster stay.
set -u
files="/run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid"
for f in $files; do
  [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
done
for _ in $(seq 20); do
  alive=0
  for f in $files; do
    [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
  done
  [ $alive = 0 ] && { echo "slurm: stopped"; exit 0; }
  sleep 0.5
done
echo "slurm: daemons still running" >&2
exit 1
