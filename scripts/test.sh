#!/usr/bin/env bash
# The whole test suite: lint, unit and integration tests, fault injection (ranks leaving early
# or stopped, unpicklable objects, full disks, changed models), end-to-end tests on a real local Slurm
# (started and stopped by the tests; needs root and apt), then the MPI tests at 2, 3 and 4 ranks
# and once more on 4 ranks split into 2 fake nodes (the hierarchical path), then at 64 ranks
# (tests/scale: one launch per case), then across two real
# nodes on this machine (tests/twonode/run.sh, as root), then the GPU tests on
# the device simulator (tests/devicesim) at 1-4 ranks. Every MPI run is
# bounded by `timeout`, so a hang fails with a message instead of stalling.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(bash scripts/venv.sh)
export PATH="$venv/bin:$PATH"
unset HPCDIST_RANKS_PER_NODE
export PYTHONDONTWRITEBYTECODE=1 HPCDIST_TIMEOUT_SECONDS=${HPCDIST_TIMEOUT_SECONDS:-60}
limit=${MPI_TEST_LIMIT:-600}

# Jobs that the tests abort or kill on purpose leave MPICH's shared-memory files behind; remove
# those created during this run that no live process maps, however the run ends.
marker=$(mktemp)
clean_shm() {
  local f
  for f in $(find /dev/shm -maxdepth 1 -name 'mpich_shm_*' -newer "$marker" 2>/dev/null); do
    grep -qsF "$f" /proc/[0-9]*/maps || rm -f "$f"
  done
  rm -f "$marker"
}
trap clean_shm EXIT

# shellcheck source=scripts/bounded.sh
source "$root/scripts/bounded.sh"

echo "== ruff"
ruff check .
ruff format --check .
echo "== unit and integration tests (1 process, jobs launched with timeouts)"
# Hundreds of tests and dozens of launched jobs: a bound of its own (each test also has one).
(limit=${UNIT_TEST_LIMIT:-1500} && bounded "unit+integration" \
  python -m pytest -q -rs -p no:cacheprovider tests/unit tests/integration tests/gpu)
echo "== fault injection: jobs that fail on purpose, each under a timeout (tests/faults)"
bounded "faults" python -m pytest -q -rs -p no:cacheprovider tests/faults
echo "== Slurm tests against real slurmctld/slurmd/munged on this machine (scripts/slurm-up.sh)"
# Jobs queue and requeue under a real scheduler: allow each test up to 8 minutes.
PYTEST_RANK_TIMEOUT=480 bounded "slurm" python -m pytest -q -rs -p no:cacheprovider tests/slurm
for n in 2 3 4; do
  echo "== MPI tests on $n ranks"
  bounded "mpiexec -n $n" mpiexec -n "$n" bash tests/mpi_pytest.sh -q tests/mpi
done
echo "== MPI tests on 4 ranks in 2 fake nodes (HPCDIST_RANKS_PER_NODE=2)"
HPCDIST_RANKS_PER_NODE=2 bounded "mpiexec -n 4 (2 nodes)" \
  mpiexec -n 4 bash tests/mpi_pytest.sh -q tests/mpi
# Many ranks (tests/scale): 64 ranks oversubscribed, one mpiexec per case, each under its own
# timeout; prints each case's wall-clock, coverage and memory per rank (docs/testing.md, 4a).
echo "== scale: 64 ranks oversubscribed on the cores (tests/scale)"
(limit=${SCALE_TEST_LIMIT:-600} && bounded "scale step" \
  python -m pytest -q -rs -p no:cacheprovider tests/scale)
# Two real nodes (scripts/twonode.sh: namespaces with their own hostname, /dev/shm, PIDs and
# network, TCP over veths): the MPI suite at 2+2, then tests/twonode. Needs root; otherwise the
# step says why and runs only its one-node test.
echo "== two real nodes (namespaces; scripts/twonode.sh)"
(limit=900 && bounded "two-node step" bash tests/twonode/run.sh)
# The GPU code without a GPU: tests/devicesim stands in for CuPy and NCCL (numpy arrays on
# simulated devices, CuPy's rules enforced, NCCL's calls reduced over MPI). It checks hpcdist's
# device logic, not CUDA: tests/gpu/run.sh on a real GPU does that.
echo "== GPU tests on the device simulator (4 simulated GPUs per process; not CUDA)"
export DEVICESIM_GPUS=4
PYTHONPATH=tests/devicesim bounded "GPU tests (simulator)" \
  python -m pytest -q -rs -p no:cacheprovider tests/gpu
for n in 2 3 4; do
  PYTHONPATH=tests/devicesim bounded "NCCL across $n ranks (simulator)" \
    mpiexec -n "$n" bash tests/mpi_pytest.sh -q tests/gpu/test_nccl_ranks.py
done
echo "== unit tests and the MPI suite with GPUs visible (simulator: strategies bind GPUs, NCCL)"
PYTHONPATH=tests/devicesim bounded "unit (simulator)" \
  python -m pytest -q -p no:cacheprovider tests/unit
for n in 2 4; do
  PYTHONPATH=tests/devicesim bounded "mpiexec -n $n (simulator)" \
    mpiexec -n "$n" bash tests/mpi_pytest.sh -q tests/mpi
done
echo "== GPU benchmarks run end to end on the simulator (smoke run: figures meaningless)"
PYTHONPATH=tests/devicesim bounded "allreduce --gpu (simulator)" \
  python benchmarks/allreduce.py --gpu --max-mib 1 --rounds 1 --budget 0.05 >/dev/null
PYTHONPATH=tests/devicesim bounded "train_gpu (simulator)" \
  python benchmarks/train_gpu.py --batch 64 --steps 2 --rounds 1 >/dev/null
