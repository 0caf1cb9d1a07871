#!/usr/bin/env bash
# hpcdist beside its peers (raw mpi4py, torch.distributed with gloo, TensorFlow) on five
# workloads, in one run: all-reduce, fusion of small tensors, a training step, a 1 GiB checkpoint,
# and one-process train steps of three models (CNN, ResNet-20, transformer) against Keras 3.
# The peers live in their own environment (.venv-peers): torch and TensorFlow never become
# hpcdist dependencies. Writes JSON under benchmarks/results/peers/ and one PNG per workload into
# docs/results/peers_*.png. `PEERS_ONLY=allreduce,fusion,train,checkpoint,models` picks workloads,
# `PEERS_ARGS` adds arguments to every workload script; `PEERS_SETUP_ONLY=1` only builds the venv.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${PEERS_VENV:-$root/.venv-peers}
# torch: the CPU build. A plain `pip install torch` may resolve to a CUDA build of several GB;
# TORCH_SPEC names the release whose CPU wheel this machine's package index serves.
torch_spec=${TORCH_SPEC:-torch==2.13.0}
tf_spec=${TF_SPEC:-tensorflow-cpu==2.21.*}
t_start=$(date +%s)
# shellcheck source=scripts/ensure_venv.sh
source "$root/scripts/ensure_venv.sh"
ensure_venv "$venv" "$(install_key setup.cfg pyproject.toml -- "$torch_spec" "$tf_spec" threadpoolctl)" \
  "$torch_spec" "$tf_spec" threadpoolctl -e "$root[mpich,bench]"
# a CUDA build would pull nvidia-* wheels: refuse it rather than benchmark the wrong thing
if [ "$VENV_INSTALLED" = 1 ] && "$venv/bin/python" -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
  rm -f "$VENV_STAMP"
  echo "bench_peers: torch pulled CUDA packages; set TORCH_SPEC to a CPU build" >&2
  exit 1
fi
[ "${PEERS_SETUP_ONLY:-0}" = 1 ] && exit 0

export PATH="$venv/bin:$PATH"
# one thread per process for every contender
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
out=benchmarks/results/peers
mkdir -p "$out" docs/results
only=${PEERS_ONLY:-allreduce,fusion,train,checkpoint,models}
extra=${PEERS_ARGS:-}
run() {  # run NAME TIMEOUT COMMAND...
  local name=$1 limit=$2
  shift 2
  case ",$only," in *",$name,"*) ;; *) return 0 ;; esac
  echo "== $name" >&2
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$limit" "$@" $extra --out "$out/$name.json" --plot "docs/results/peers_$name.png"
  echo "== $name: $(($(date +%s) - t0)) s" >&2
}
# Each collective workload starts its own mpiexec jobs (hpcdist/mpi4py, torch, TensorFlow) per
# round, so every contender runs in its own processes and the rounds interleave them.
run allreduce 1500 python benchmarks/peers/allreduce.py
run fusion 900 python benchmarks/peers/fusion.py
run train 1500 python benchmarks/peers/train.py
run checkpoint 1200 python benchmarks/peers/checkpoint.py
# one process per contender, model and batch size (one thread each), rounds interleaved
run models 2400 python benchmarks/peers/models.py
echo "bench-peers: $(($(date +%s) - t_start)) s in all" >&2
