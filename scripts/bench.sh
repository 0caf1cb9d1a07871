#!/usr/bin/env bash
# Run the benchmarks on 2 ranks, writing JSON (and a plot) under benchmarks/results/.
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
