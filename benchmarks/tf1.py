"""TF1 between-graph training (`hpcdist.compat.v1`) against `ParameterServerStrategy`.

Run: ``python benchmarks/tf1.py [--out results.json] [--steps N] [--rounds R]``. On one
process it is the driver: it launches, ``--rounds`` times in interleaved order,

- ``tf1 async`` with 1 and 2 workers (``mpiexec -n 3`` / ``-n 4``: 2 ps tasks first): the guide's
  setup, every worker running its own steps with ``GradientDescentOptimizer`` under
  ``replica_device_setter``, until ``StopAtStepHook(last_step=N)``;
- ``tf1 sync``, 2 workers, ``SyncReplicasOptimizer(R=2, N=2)``: N updates of 2 gradients each;
- ``ps`` with 1 and 2 workers (``HPCDIST_NUM_PS=2 mpiexec -n 4`` / ``-n 5``): the same model and
  update as scheduled functions of a `ClusterCoordinator` (the coordinator schedules N step
  functions, then joins).

The model: an MLP 32-128-128-1 (21k parameters in 6 variables over 2 ps), mean squared error
on a fresh batch of 64 per step, SGD 0.01. Figures are global steps per second from the
workers' first step to the last (TF1) or from the first schedule to ``join`` (ps), medians over
rounds; ratios are TF1 / ParameterServerStrategy. One thread per process (numpy's BLAS).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit  # noqa: E402

import hpcdist as hd  # noqa: E402
import hpcdist.compat.v1 as tf  # noqa: E402

SIZES = (32, 128, 128, 1)
BATCH = 64


def initial_values() -> list[np.ndarray]:
    """Weights and biases of the MLP (same for both contenders)."""
    rng = np.random.default_rng(0)
    out = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        out.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        out.append(np.zeros(fan_out, np.float32))
    return out


TRUE_W = np.random.default_rng(1).standard_normal((SIZES[0], 1)).astype(np.float32)


def mlp_loss(params: list, rng: np.random.Generator) -> object:
    """Mean squared error of the MLP on a fresh batch."""
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.tanh(x @ TRUE_W)
    h = x
    for i in range(0, len(params), 2):
        h = hd.nn.ops.add(hd.nn.ops.matmul(h, params[i]), params[i + 1])
        if i + 2 < len(params):
            h = hd.nn.ops.relu(h)
    return hd.nn.ops.reduce_mean(hd.nn.ops.square(hd.nn.ops.subtract(h, y)))


def tf1_job(mode: str, steps: int, out: str | None) -> None:
    world = MPI.COMM_WORLD
    num_ps, num_workers = 2, world.size - 2
    rank = world.rank
    job, task = ("ps", rank) if rank < num_ps else ("worker", rank - num_ps)
    cluster = tf.train.ClusterSpec(
        {
            "ps": [f"localhost:{2222 + i}" for i in range(num_ps)],
            "worker": [f"localhost:{3333 + i}" for i in range(num_workers)],
        }
    )
    server = tf.train.Server(cluster, job_name=job, task_index=task)
    workers = world.Split(0 if job == "worker" else MPI.UNDEFINED, rank)
    if job == "ps":
        server.join()
        if rank == 0:  # world rank 0 writes what worker 0 measured
            emit(world.recv(source=num_ps, tag=5), out)
        return
    with tf.device(tf.train.replica_device_setter(cluster=cluster)):
        params = [tf.Variable(v, name=f"p{i}") for i, v in enumerate(initial_values())]
        global_step = tf.train.get_or_create_global_step()
        rng = np.random.default_rng(10 + task)

        def loss():
            return mlp_loss(params, rng)

        opt = tf.train.GradientDescentOptimizer(0.01)
        hooks = [tf.train.StopAtStepHook(last_step=steps)]
        if mode == "sync":
            opt = tf.train.SyncReplicasOptimizer(opt, num_workers, num_workers)
            hooks.append(opt.make_session_run_hook(task == 0))
        train_op = opt.minimize(loss, global_step=global_step)
    runs = 0
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=task == 0, hooks=hooks, log_step_count_steps=0
    ) as sess:
        workers.Barrier()
        start = time.perf_counter()
        while not sess.should_stop():
            _, last = sess.run([train_op, loss])
            runs += 1
        end = time.perf_counter()
    spans = workers.gather((start, end, runs, float(last)), root=0)
    if task == 0:
        first, final = min(s[0] for s in spans), max(s[1] for s in spans)
        world.send(
            {
                "contender": f"tf1_{mode}",
                "workers": num_workers,
                "steps": steps,
                "runs": sum(s[2] for s in spans),
                "steps_per_s": steps / (final - first),
                "final_loss": max(s[3] for s in spans),
            },
            dest=0,
            tag=5,
        )


def ps_job(steps: int, out: str | None) -> None:
    strategy = hd.ParameterServerStrategy()
    coordinator = hd.ClusterCoordinator(strategy)
    with strategy.scope():
        params = [strategy.Variable(v) for v in initial_values()]
        opt = hd.nn.optimizers.SGD(0.01)
        opt.build(params)

    def step(seed):
        rng = np.random.default_rng(seed)
        with hd.nn.GradientTape() as tape:
            value = mlp_loss(params, rng)
        opt.apply_gradients(zip(tape.gradient(value, params), params, strict=True))
        return float(value.value)

    for i in range(20):  # warm up: functions cached on the workers
        coordinator.schedule(step, args=(i,))
    coordinator.join()
    start = time.perf_counter()
    last = None
    for i in range(steps):
        last = coordinator.schedule(step, args=(1000 + i,))
    coordinator.join()
    elapsed = time.perf_counter() - start
    emit(
        {
            "contender": "ps_strategy",
            "workers": strategy.cluster_resolver.cluster_spec().num_tasks("worker"),
            "steps": steps,
            "steps_per_s": steps / elapsed,
            "final_loss": last.fetch(),
        },
        out,
    )


def blas_kernel() -> str:
    """Which BLAS kernels numpy runs (OpenBLAS's core type, as pinned or detected)."""
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    config = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    name = f"{config.get('name', 'blas')} {config.get('version', '')}".strip()
    return f"{name}, OPENBLAS_CORETYPE={pinned}" if pinned else f"{name}, core type detected"


RUNS = [
    ("tf1_async", 1, ["tf1", "async"], 3),
    ("tf1_async", 2, ["tf1", "async"], 4),
    ("tf1_sync", 2, ["tf1", "sync"], 4),
    ("ps_strategy", 1, ["ps"], 4),
    ("ps_strategy", 2, ["ps"], 5),
]


def driver(steps: int, rounds: int, out: str | None) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HPCDIST_"))}
    env["HPCDIST_NUM_PS"] = "2"
    figures: dict[str, list[float]] = {}
    losses: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name, workers, args, ranks in RUNS:
                path = os.path.join(tmp, f"{name}-{workers}-{r}.json")
                cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__)]
                cmd += ["--job", *args, "--steps", str(steps), "--out", path]
                subprocess.run(cmd, check=True, env=env, timeout=600, stdout=subprocess.DEVNULL)
                with open(path) as f:
                    result = json.load(f)
                key = f"{name}_{workers}w"
                figures.setdefault(key, []).append(result["steps_per_s"])
                losses[key] = result["final_loss"]
    med = {k: float(np.median(v)) for k, v in figures.items()}
    emit(
        {
            "benchmark": "tf1",
            "machine_cpus": os.cpu_count(),
            "steps": steps,
            "rounds": rounds,
            "blas": blas_kernel(),
            "steps_per_s_median": med,
            "steps_per_s_rounds": figures,
            "final_loss": losses,
            "ratio_tf1_over_ps": {
                "async_1w": med["tf1_async_1w"] / med["ps_strategy_1w"],
                "async_2w": med["tf1_async_2w"] / med["ps_strategy_2w"],
                "sync_2w": med["tf1_sync_2w"] / med["ps_strategy_2w"],
            },
            "speedup_2w_over_1w": {
                "tf1_async": med["tf1_async_2w"] / med["tf1_async_1w"],
                "ps_strategy": med["ps_strategy_2w"] / med["ps_strategy_1w"],
            },
        },
        out,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--job", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job is None:
        driver(args.steps, args.rounds, args.out)
    elif args.job[0] == "tf1":
        tf1_job(args.job[1], args.steps, args.out)
    else:
        ps_job(args.steps, args.out)


if __name__ == "__main__":
    main()
