#!/usr/bin/env bash
# Every GPU test and the GPU benchmarks on one machine with one GPU, in under 10 minutes.
#
#   bash tests/gpu/run.sh [OUT_DIR]        (default OUT_DIR: gpu-results/)
#
# Writes OUT_DIR/info.txt (hpcdist info), gpu-tests.xml/.txt (pytest), allreduce_gpu.json
# (1-rank NCCL and pinned staging against raw NCCL and raw staging) and train_gpu.json (hd.nn
# on CuPy against numpy and hand-written code). Uses the first Python that imports CuPy, mpi4py
# and h5py (HPCDIST_GPU_PYTHON, .venv, python3), else makes .venv-gpu with hpcdist[gpu].
# Single-GPU only: multi-GPU MirroredStrategy, NCCL across ranks and hierarchical NCCL need more.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-results}
mkdir -p "$out"

py=${HPCDIST_GPU_PYTHON:-}
if [ -z "$py" ]; then
  for candidate in .venv/bin/python python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c "import cupy, mpi4py, h5py, cloudpickle" 2>/dev/null; then
      py=$candidate
      break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "no Python with CuPy found: creating .venv-gpu with hpcdist[gpu]"
  python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -q -e '.[mpich,test,gpu]' || {
    echo "cannot install hpcdist[gpu] (no network?): set HPCDIST_GPU_PYTHON" >&2
    exit 2
  }
  py=.venv-gpu/bin/python
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# Wheels carried to a machine without network (e.g. the mpich wheel, see docs/gpus.md).
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hpcdist-site .whl/*.whl &&
    export PYTHONPATH=$PYTHONPATH:/tmp/hpcdist-site
fi
"$py" -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])" || {
  echo "mpi4py finds no MPI library: pip install mpich (or carry its wheel)" >&2
  exit 2
}
"$py" -m hpcdist info | tee "$out/info.txt"

status=0
timeout 300 "$py" -m pytest -q -p no:cacheprovider -rs tests/gpu \
  --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.txt" || status=1
if ! "$py" -c "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0" 2>"$out/no-gpu.txt"; then
  echo "no usable CUDA device ($(tail -1 "$out/no-gpu.txt")): GPU tests skipped, benchmarks not run" >&2
  exit 3
fi
timeout 150 "$py" benchmarks/allreduce.py --gpu --max-mib 256 --rounds 3 \
  --out "$out/allreduce_gpu.json" || status=1
timeout 120 "$py" benchmarks/train_gpu.py --out "$out/train_gpu.json" || status=1
echo "tests/gpu/run.sh: exit $status (results in $out/)"
exit $status
