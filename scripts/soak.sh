#!/usr/bin/env bash
# Soak runs (not part of `make test`): a long random mix of collectives checked against numpy,
# then minutes of Model.fit with a checkpoint every epoch, then parameter-server training with
# workers SIGKILLed every 3 s (tests/soak/soak_ps_chaos.py), each under a wall-clock bound.
# Prints each run's JSON (wrong results, RSS growth); fails if any result was wrong.
# NP=ranks (default 2), SOAK_COUNT=collectives (default 100000), SOAK_MINUTES=fit (default 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(bash scripts/venv.sh)
export PATH="$venv/bin:$PATH"
np=${NP:-2}
count=${SOAK_COUNT:-100000}
minutes=${SOAK_MINUTES:-3}
export HPCDIST_TIMEOUT_SECONDS=${HPCDIST_TIMEOUT_SECONDS:-60}
echo "== $count collectives on $np ranks"
timeout 1800 mpiexec -n "$np" python tests/soak/soak_collectives.py --count "$count"
echo "== $minutes minutes of fit with checkpoints on $np ranks"
timeout $(( ${minutes%.*} * 60 + 600 )) mpiexec -n "$np" python tests/soak/soak_fit.py --minutes "$minutes"
echo "== parameter-server chaos: 2 ps + 4 workers, a random worker SIGKILLed every 3 s for a minute"
out=$(timeout 900 python -m hpcdist run --ps 2 --workers 4 --worker-restarts 1000 \
  tests/soak/soak_ps_chaos.py --functions "${SOAK_PS_FUNCTIONS:-10000}" --seconds 60 --every 3 \
  | tail -n 1)
echo "$out"
echo "$out" | python -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["ok"] else 1)'
