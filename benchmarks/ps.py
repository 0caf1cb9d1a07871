"""Parameter server: one-sided variable traffic against raw RMA, and async training throughput.

Run: ``python benchmarks/ps.py [--launch single|ft|both] [--out results.json]``. It is the
driver: ``single`` launches ``mpiexec -n 4`` (coordinator, 2 ps, 1 worker) and ``mpiexec -n 5``
(2 workers), with ``HPCDIST_NUM_PS=2``; ``ft`` the fault-tolerant launch ``hpcdist run --ps 2
--workers 1`` and ``--workers 2``, where only hpcdist's own pull/push and the training run (a
worker has no window, so no raw RMA baseline); ``both`` (the default) runs all four and adds
``ft_over_single_training``. Inside a job (``--job``):

- ``dense``: from a worker (inside a scheduled function), ``var.read_value()`` and
  ``var.assign_add(delta)`` of a `PSVariable` against raw mpi4py ``Get``/``Accumulate`` +
  ``Flush`` on the same window, offset and target, in interleaved rounds; medians; ratio =
  hpcdist throughput / raw throughput.
- ``sparse``: ``table.sparse_read(ids)`` and ``table.scatter_add(ids, rows)`` of a 2-way
  sharded 100k x 64 float32 table, 512 random ids per call, against raw ``Get``/``Accumulate``
  with an indexed datatype per shard, rows/s: ``raw`` on ids already deduplicated and split
  outside the timing (less work than hpcdist does), ``raw_complete`` doing what a hand-written
  caller must (``np.unique``, ``np.add.at``, split, RMA, gather).
- ``training``: asynchronous training of an embedding model with ``Model.fit`` (a 100k x 64
  table sharded in 2, 8 ids per example drawn from its first 4096 rows, a 64-unit hidden layer,
  Adam with lazy sparse updates of the table and its slots, batch 128 per step): samples/s over
  all workers, and the loss per epoch.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, median_time  # noqa: E402

import hpcdist as hd  # noqa: E402
from hpcdist.strategies.ps.runtime import coordinator_runtime  # noqa: E402

DENSE_BYTES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
ROWS, WIDTH, IDS, HOT_ROWS = 100_000, 64, 512, 4096
ROUNDS = 5


def _spec(var):
    st = var.storage
    win, target = st.located()
    return win.handle, target, (st.offset, st.size, st.mpi_type)


def dense_only(variables):
    """Worker side, fault-tolerant launch: hpcdist's pull and push of each variable (medians).

    The worker reaches the ps by messages there (no window of its own), so there is no raw
    RMA to compare with: only hpcdist's own GB/s.
    """
    out = []
    for var in variables:
        delta = np.full(var.shape, 1e-6, var.dtype)
        nbytes = var.dtype.itemsize * int(np.prod(var.shape))
        reps = max(3, min(200, (16 << 20) // nbytes))
        pull = float(np.median([median_time(var.read_value, reps) for _ in range(ROUNDS)]))
        push = float(
            np.median(
                [
                    median_time(lambda v=var, d=delta: v.assign_add(d, read_value=False), reps)
                    for _ in range(ROUNDS)
                ]
            )
        )
        out.append(
            {
                "bytes": nbytes,
                "pull_GBps": {"hpcdist": nbytes / pull / 1e9},
                "push_GBps": {"hpcdist": nbytes / push / 1e9},
            }
        )
    return out


def dense_micro(variables):
    """Worker side: hpcdist vs raw Get/Accumulate on each variable; medians over rounds."""
    out = []
    for var in variables:
        win, target, spec = _spec(var)
        buf = np.empty(var.shape, var.dtype)
        delta = np.full(var.shape, 1e-6, var.dtype)
        reps = max(3, min(500, (64 << 20) // (var.dtype.itemsize * int(np.prod(var.shape)))))

        def raw_get(win=win, target=target, spec=spec, buf=buf):
            win.Get(buf, target, spec)
            win.Flush(target)

        def raw_acc(win=win, target=target, spec=spec, delta=delta):
            win.Accumulate(delta, target, spec, op=MPI.SUM)
            win.Flush(target)

        fns = {
            "get_hpcdist": var.read_value,
            "get_raw": raw_get,
            "acc_hpcdist": lambda var=var, delta=delta: var.assign_add(delta, read_value=False),
            "acc_raw": raw_acc,
        }
        times = {k: [] for k in fns}
        for _ in range(ROUNDS):
            for key, fn in fns.items():
                times[key].append(median_time(fn, reps))
        med = {k: float(np.median(v)) for k, v in times.items()}
        nbytes = var.dtype.itemsize * int(np.prod(var.shape))
        out.append(
            {
                "bytes": nbytes,
                "pull_GBps": {
                    "hpcdist": nbytes / med["get_hpcdist"] / 1e9,
                    "raw": nbytes / med["get_raw"] / 1e9,
                },
                "push_GBps": {
                    "hpcdist": nbytes / med["acc_hpcdist"] / 1e9,
                    "raw": nbytes / med["acc_raw"] / 1e9,
                },
                "pull_ratio": med["get_raw"] / med["get_hpcdist"],
                "push_ratio": med["acc_raw"] / med["acc_hpcdist"],
            }
        )
    return out


def raw_rows(shard, local, data, kind):
    """Raw mpi4py: ``Get`` or ``Accumulate(SUM)`` rows ``local`` of one shard, one indexed type."""
    st = shard.storage
    win, target = st.located()
    win = win.handle
    dtype = MPI.FLOAT.Create_indexed_block(WIDTH, (local * WIDTH).tolist()).Commit()
    if kind == "get":
        win.Get(data, target, (st.offset, 1, dtype))
    else:
        win.Accumulate(data, target, (st.offset, 1, dtype), op=MPI.SUM)
    win.Flush(target)
    dtype.Free()


def sparse_micro(table, seed):
    """Worker side: sparse_read / scatter_add of 512 ids against raw indexed Get/Accumulate."""
    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, ROWS, IDS) for _ in range(8)]
    rows = np.full((IDS, WIDTH), 1e-6, np.float32)
    bounds = np.cumsum([0] + [s.shape[0] for s in table.variables])
    prepared = []
    for ids in batches:
        unique = np.unique(ids)
        per_shard = []
        for s, shard in enumerate(table.variables):
            local = unique[(unique >= bounds[s]) & (unique < bounds[s + 1])] - bounds[s]
            per_shard.append((shard, local, np.full((len(local), WIDTH), 1e-6, np.float32)))
        prepared.append(per_shard)
    state = {"i": 0}

    def raw(kind):
        per_shard = prepared[state["i"] % len(prepared)]
        state["i"] += 1
        for shard, local, data in per_shard:
            raw_rows(shard, local, data, kind)

    def raw_complete(kind):
        """What a hand-written caller must do with raw ids: deduplicate, split, then RMA."""
        ids = batches[state["i"] % len(batches)]
        state["i"] += 1
        unique, inverse = np.unique(ids, return_inverse=True)
        if kind == "get":
            data = np.empty((len(unique), WIDTH), np.float32)
        else:
            data = np.zeros((len(unique), WIDTH), np.float32)
            np.add.at(data, inverse, rows)
        cuts = np.searchsorted(unique, bounds)
        for s, shard in enumerate(table.variables):
            lo, hi = cuts[s], cuts[s + 1]
            raw_rows(shard, unique[lo:hi] - bounds[s], data[lo:hi], kind)  # rows: views
        return data[inverse] if kind == "get" else None

    def hd_read():
        table.sparse_read(batches[state["i"] % len(batches)])
        state["i"] += 1

    def hd_add():
        table.scatter_add(batches[state["i"] % len(batches)], rows)
        state["i"] += 1

    fns = {
        "read_hpcdist": hd_read,
        "read_raw": lambda: raw("get"),
        "read_raw_complete": lambda: raw_complete("get"),
        "add_hpcdist": hd_add,
        "add_raw": lambda: raw("acc"),
        "add_raw_complete": lambda: raw_complete("acc"),
    }
    times = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for key, fn in fns.items():
            times[key].append(median_time(fn, 50))
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "ids_per_call": IDS,
        "read_rows_per_s": {
            "hpcdist": IDS / med["read_hpcdist"],
            "raw": IDS / med["read_raw"],
            "raw_complete": IDS / med["read_raw_complete"],
        },
        "add_rows_per_s": {
            "hpcdist": IDS / med["add_hpcdist"],
            "raw": IDS / med["add_raw"],
            "raw_complete": IDS / med["add_raw_complete"],
        },
        "read_ratio": med["read_raw"] / med["read_hpcdist"],
        "add_ratio": med["add_raw"] / med["add_hpcdist"],
        "read_ratio_complete": med["read_raw_complete"] / med["read_hpcdist"],
        "add_ratio_complete": med["add_raw_complete"] / med["add_hpcdist"],
    }


class EmbeddingModel(hd.nn.Model):
    """Mean of 8 embedding rows, then a small MLP."""

    def __init__(self):
        super().__init__()
        self.embedding = hd.nn.layers.Embedding(ROWS, WIDTH)
        self.hidden = hd.nn.layers.Dense(64, activation="relu")
        self.out = hd.nn.layers.Dense(1)

    def call(self, inputs, training=None):
        """Forward pass."""
        return self.out(self.hidden(hd.nn.ops.reduce_mean(self.embedding(inputs), axis=1)))


def training(strategy, workers):
    rng = np.random.default_rng(0)
    x = rng.integers(0, HOT_ROWS, (8192, 8))  # the rows in use: a hot part of the table
    y = rng.standard_normal(ROWS)[x].mean(axis=1, keepdims=True).astype(np.float32)
    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = EmbeddingModel()
        model.compile(optimizer=hd.nn.optimizers.Adam(0.01), loss="mse")
    steps = 100
    history = model.fit(x, y, batch_size=128, epochs=3, steps_per_epoch=steps, verbose=0)
    times = history.history["time_s"][1:]  # the first epoch includes start-up
    return {
        "workers": workers,
        "batch_per_step": 128,
        "steps_per_epoch": steps,
        "samples_per_s": 128 * steps / float(np.median(times)),
        "loss": [float(v) for v in history.history["loss"]],
    }


def shard_tables(shape, dtype):
    """Two shards for tables (2-d, at least 10k rows), none for anything else."""
    del dtype
    table = len(shape) == 2 and shape[0] >= 10_000
    return [2 if table else 1] + [1] * (len(shape) - 1)


def job(out: str | None) -> None:
    strategy = hd.ParameterServerStrategy(variable_partitioner=shard_tables)
    coordinator = hd.ClusterCoordinator(strategy)
    with strategy.scope():
        dense = [strategy.Variable(np.zeros(n // 4, np.float32)) for n in DENSE_BYTES]
        table = strategy.Variable(np.zeros((ROWS, WIDTH), np.float32))
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    result = {
        "benchmark": "ps",
        "ranks": MPI.COMM_WORLD.Get_size(),
        "ps": strategy.cluster_resolver.cluster_spec().num_tasks("ps"),
        "workers": workers,
    }
    if coordinator_runtime().fault_tolerant:  # a worker has no window: no raw RMA baseline
        result["launch"] = "ft"
        result["dense"] = coordinator.schedule(dense_only, args=(dense,)).fetch()
    else:
        result["launch"] = "single"
        result["dense"] = coordinator.schedule(dense_micro, args=(dense,)).fetch()
        result["sparse"] = coordinator.schedule(sparse_micro, args=(table, 1)).fetch()
    result["training"] = training(strategy, workers)
    emit(result, out)


def driver(out: str | None, launch: str) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HPCDIST_"))}
    me = [sys.executable, os.path.abspath(__file__), "--job"]
    commands = {}
    if launch in ("single", "both"):
        for name, ranks in (("one_worker", 4), ("two_workers", 5)):
            commands[name] = ([mpiexec, "-n", str(ranks), *me], dict(env, HPCDIST_NUM_PS="2"))
    if launch in ("ft", "both"):  # hpcdist run --ps 2 --workers W: one MPI job per worker
        ft = [sys.executable, "-m", "hpcdist", "run", "--ps", "2", "--workers"]
        for name, workers in (("ft_one_worker", 1), ("ft_two_workers", 2)):
            commands[name] = ([*ft, str(workers), *me], env)
    result: dict = {"benchmark": "ps", "machine_cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cmd, cmd_env) in commands.items():
            path = os.path.join(tmp, f"{name}.json")
            t0 = time.perf_counter()
            subprocess.run(
                [*cmd, "--out", path],
                check=True,
                env=cmd_env,
                timeout=900,
                stdout=subprocess.DEVNULL,
            )
            with open(path) as f:
                result[name] = json.load(f)
            result[name]["wall_s"] = time.perf_counter() - t0
    for prefix in ("", "ft_"):
        if f"{prefix}two_workers" in result:
            one = result[f"{prefix}one_worker"]["training"]["samples_per_s"]
            two = result[f"{prefix}two_workers"]["training"]["samples_per_s"]
            result[f"{prefix}training_speedup_2_over_1"] = two / one
    if launch == "both":
        result["ft_over_single_training"] = {
            n: result[f"ft_{n}"]["training"]["samples_per_s"]
            / result[n]["training"]["samples_per_s"]
            for n in ("one_worker", "two_workers")
        }
    emit(result, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--launch",
        choices=("single", "ft", "both"),
        default="both",
        help="single MPI jobs (mpiexec -n 4 and 5), the fault-tolerant launch (hpcdist run "
        "--ps 2 --workers 1 and 2), or both side by side (default)",
    )
    args = parser.parse_args()
    if args.job:
        job(args.out)
    else:
        driver(args.out, args.launch)


if __name__ == "__main__":
    main()
