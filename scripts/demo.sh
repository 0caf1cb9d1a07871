#!/usr/bin/env bash
# The main job: `hpcdist info`, then a classifier trained on scikit-learn's bundled handwritten
# digits under MultiWorkerMirroredStrategy on 4 ranks (NP=... to change).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$(bash scripts/venv.sh)
export PATH="$venv/bin:$PATH"
np=${NP:-4}
timeout 300 mpiexec -n "$np" python -m hpcdist info
timeout 600 hpcdist run -n "$np" examples/digits.py
