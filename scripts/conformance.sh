#!/usr/bin/env bash
# The conformance suite (tests/conformance): each case runs under TensorFlow 2.21 (tensorflow-cpu,
# Keras 3) and under hpcdist in the same process, and the results are compared. TensorFlow lives
# in its own environment (.venv-conformance) and never becomes an hpcdist dependency. The venv is
# reinstalled only when setup.cfg, pyproject.toml or the TensorFlow release change.
# `CONFORMANCE_LIMIT` bounds the pytest run in seconds (default 1200); extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${CONFORMANCE_VENV:-$root/.venv-conformance}
tf_spec=${TF_SPEC:-tensorflow-cpu==2.21.*}
# tensorboard: the tutorials' TensorBoard callback, under both libraries (tests/conformance/test_tutorials.py)
extras=mpich,test,tensorboard
t_start=$(date +%s)
# shellcheck source=scripts/ensure_venv.sh
source "$root/scripts/ensure_venv.sh"
ensure_venv "$venv" "$(install_key setup.cfg pyproject.toml -- "$tf_spec" "$extras")" \
  "$tf_spec" "pytest>=8" -e "$root[$extras]"
t_ready=$(date +%s)
echo "== environment ready in $((t_ready - t_start)) s" >&2

export PATH="$venv/bin:$PATH"
export PYTHONDONTWRITEBYTECODE=1 TF_CPP_MIN_LOG_LEVEL=2
limit=${CONFORMANCE_LIMIT:-1200}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0  # pipefail: the pipeline's status is pytest's (or timeout's), not tee's
timeout --kill-after=10 "$limit" \
  python -m pytest -q -rs -p no:cacheprovider tests/conformance "$@" 2>&1 | tee "$log" || rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "FAILED: the conformance suite did not finish within ${limit}s (hang?)" >&2
fi
t_end=$(date +%s)
# the cases counted from pytest's last line ("3 failed, 250 passed in 160.2s")
cases=$(grep -E ' in [0-9.]+s' "$log" | tail -n 1 |
  grep -Eo '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' | awk '{n += $1} END {print n + 0}')
echo "conformance: $cases cases in $((t_end - t_ready)) s (environment: $((t_ready - t_start)) s)"
exit "$rc"
