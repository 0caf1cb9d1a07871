#!/usr/bin/env bash
# The two-node step of `make test` (also runnable alone, as root): brings up the cluster of
# scripts/twonode.sh, runs the MPI suite at 4 ranks as 2+2, then tests/twonode (hpcdist info,
# the all-reduce check, the examples, a checkpoint saved on two nodes and restored on one, the
# TF1 trainer, rate-limited runs and the wait messages at 5 Mbit), and always takes it down.
# Where the cluster cannot be built it says why and runs only the one-node test of the wait
# messages. Prints the pass counts and the time.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export PYTHONDONTWRITEBYTECODE=1 HPCDIST_TIMEOUT_SECONDS=${HPCDIST_TIMEOUT_SECONDS:-60}
unset HPCDIST_RANKS_PER_NODE
export TWONODE_STATE=${TWONODE_STATE:-/tmp/hpcdist-twonode-$$}
start=$(date +%s)
summary=()
rc=0
if why=$(bash scripts/twonode.sh check); then
  trap 'bash scripts/twonode.sh down' EXIT
  bash scripts/twonode.sh up
  log=$(mktemp)
  TWONODE_LIMIT=${MPI_TEST_LIMIT:-400} bash scripts/twonode.sh run 2+2 \
    bash tests/mpi_pytest.sh -q tests/mpi 2>&1 | grep -v " UCX " | tee "$log" || rc=1
  summary+=("MPI suite at 2+2: $(grep -E '^[0-9]+ (passed|failed)|(passed|failed).* in ' "$log" \
    | tail -1)")
  rm -f "$log"
else
  echo "SKIPPED: two real nodes: $why (needs root and network/PID/mount namespaces)"
fi
log=$(mktemp)
timeout --kill-after=10 "${TWONODE_PYTEST_LIMIT:-600}" python -m pytest -q -rs \
  -p no:cacheprovider tests/twonode 2>&1 | tee "$log" || rc=1
summary+=("tests/twonode: $(tail -1 "$log")")
rm -f "$log"
echo "== two-node step: $(( $(date +%s) - start )) s"
printf '   %s\n' "${summary[@]}"
exit $rc
