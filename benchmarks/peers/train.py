"""Training step against the peers: MLP 512-1024-1024-10, float32, SGD, 2 ranks, data parallel.

Run (from the peers' venv, see ``scripts/bench_peers.sh``): ``python benchmarks/peers/train.py
[--rounds 5] [--out r.json] [--plot r.png]``. Per-replica batch 256 (global 512), one thread
per process. Each round starts every contender once, in its own two processes (the order
rotates); a contender runs one warm-up pass of ``--steps`` steps, then times ``--steps`` steps
between two of its own barriers. Medians over rounds; samples/s over both ranks; ratios are
hpcdist samples/s / peer samples/s within a round (above 1: hpcdist is faster).

- ``hpcdist``: ``Model.fit`` under ``MultiWorkerMirroredStrategy`` (the model of
  ``benchmarks/train_scaling.py``), numpy on OpenBLAS;
- ``torch_ddp``: ``DistributedDataParallel`` on gloo, the usual loop (``zero_grad``, forward,
  cross-entropy, ``backward``, ``SGD.step``);
- ``tf_mwms``: TF's ``MultiWorkerMirroredStrategy`` (two workers from TF_CONFIG on localhost
  ports) in its custom-loop form: a Keras model, ``strategy.run`` of a ``tf.function`` step
  (``GradientTape``, ``compute_average_loss``, Keras ``SGD.apply_gradients``, which all-reduces
  the gradients), fed by a cached, repeated, distributed ``tf.data`` input of global batches.
  Keras ``Model.fit`` is not used: under this strategy with two workers, Keras 3.15's fit fails
  before its first step (``_maybe_symbolic_build`` calls ``strategy.reduce`` on the first
  batch's ``PerReplica`` value: "Attempt to convert a value (PerReplica...) with an unsupported
  type to a Tensor").

Each contender reports the BLAS it ran (numpy: threadpoolctl; torch: its build's BLAS and
oneDNN; TF: whether its oneDNN ops are on).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from _common import (
    bar_plot,
    collect_rounds,
    driver_parser,
    emit,
    machine,
    numpy_blas,
    summarise,
    worker_rank,
    write_result,
)
from allreduce import tf_strategy

NAMES = ("hpcdist", "torch_ddp", "tf_mwms")
WORKERS = ("hpcdist", "torch", "tf")
SIZES = (512, 1024, 1024, 10)
RATIO = "ratio = hpcdist samples/s / peer samples/s (above 1: hpcdist is faster)"


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, SIZES[0])).astype(np.float32)
    return x, rng.integers(0, SIZES[-1], rows)


def worker_hpcdist(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from train_scaling import build

    import hpcdist as hd

    comm = MPI.COMM_WORLD
    n, b = comm.size, args.per_replica_batch
    x, y = data(b * n * args.steps, 0)  # global batches; each rank takes its shard
    model = build(hd.MultiWorkerMirroredStrategy())

    def epoch() -> None:
        model.fit(x, y, batch_size=b * n, epochs=1, verbose=0, shuffle=False)

    epoch()  # warm-up
    comm.Barrier()
    t0 = time.perf_counter()
    epoch()
    comm.Barrier()
    step_s = (time.perf_counter() - t0) / args.steps
    if comm.rank == 0:
        write_result(
            args.result,
            {"hpcdist": step_s, "blas": {"hpcdist": {"numpy": np.__version__, **numpy_blas()}}},
        )


def worker_torch(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank, size = worker_rank()
    dist.init_process_group("gloo", rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(
            nn.Linear(SIZES[0], SIZES[1]),
            nn.ReLU(),
            nn.Linear(SIZES[1], SIZES[2]),
            nn.ReLU(),
            nn.Linear(SIZES[2], SIZES[3]),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    b = args.per_replica_batch
    xn, yn = data(b * args.steps, rank)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)

    def epoch() -> None:
        for i in range(args.steps):
            opt.zero_grad()
            loss_fn(model(x[i * b : (i + 1) * b]), y[i * b : (i + 1) * b]).backward()
            opt.step()

    epoch()  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    epoch()
    dist.barrier()
    step_s = (time.perf_counter() - t0) / args.steps
    config = torch.__config__.show()
    blas = next((p for p in config.replace(",", "\n").splitlines() if "BLAS_INFO" in p), "")
    dist.destroy_process_group()
    if rank == 0:
        write_result(
            args.result,
            {
                "torch_ddp": step_s,
                "blas": {
                    "torch_ddp": {
                        "torch": torch.__version__,
                        "blas": blas.strip(),
                        "mkldnn_available": torch.backends.mkldnn.is_available(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "threads": torch.get_num_threads(),
                    }
                },
            },
        )


def worker_tf(args: argparse.Namespace) -> None:
    tf, strategy, rank, size = tf_strategy()
    import keras
    from tensorflow.python.util import _pywrap_util_port

    b = args.per_replica_batch
    x, y = data(b * size * args.steps, 0)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(b * size)
        .cache()
        .repeat()
        .with_options(options)
    )
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((SIZES[0],)),
                keras.layers.Dense(SIZES[1], activation="relu"),
                keras.layers.Dense(SIZES[2], activation="relu"),
                keras.layers.Dense(SIZES[3]),
            ]
        )
        optimizer = keras.optimizers.SGD(0.01)

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(iterator):
        def step_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                per_example = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=b * size)
            grads = tape.gradient(loss, model.trainable_variables)
            # all-reduces the gradients across the workers (CollectiveReduceV2), then SGD
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(step_fn, args=(next(iterator),))

    def epoch() -> None:
        for _ in range(args.steps):
            train_step(iterator)

    @tf.function
    def barrier():
        return strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.ones([1]))
        )

    epoch()  # warm-up (traces the train function)
    barrier().numpy()
    t0 = time.perf_counter()
    epoch()
    barrier().numpy()
    step_s = (time.perf_counter() - t0) / args.steps
    if rank == 0:
        write_result(
            args.result,
            {
                "tf_mwms": step_s,
                "blas": {
                    "tf_mwms": {
                        "tensorflow": tf.__version__,
                        "keras": keras.__version__,
                        "onednn_enabled": bool(_pywrap_util_port.IsMklEnabled()),
                        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                        "threads": [
                            tf.config.threading.get_intra_op_parallelism_threads(),
                            tf.config.threading.get_inter_op_parallelism_threads(),
                        ],
                    }
                },
            },
        )


def main() -> None:
    parser = driver_parser(__doc__, WORKERS)
    parser.add_argument("--per-replica-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=16, help="steps per timing")
    args = parser.parse_args()
    if args.worker:
        {"hpcdist": worker_hpcdist, "torch": worker_torch, "tf": worker_tf}[args.worker](args)
        return

    passed = ["--per-replica-batch", str(args.per_replica_batch), "--steps", str(args.steps)]
    rounds, errors, extra = collect_rounds(__file__, args, passed, NAMES)
    blas = extra.get("blas", {})
    global_batch = 2 * args.per_replica_batch
    rows = summarise(rounds, "hpcdist", NAMES)
    for row in rows.values():
        row["step_s"] = row.pop("median_s")
        row["samples_per_s"] = global_batch / row["step_s"]
    result = {
        "benchmark": "peers_train",
        "ranks": 2,
        "layers": SIZES,
        "per_replica_batch": args.per_replica_batch,
        "global_batch": global_batch,
        "steps_per_timing": args.steps,
        "rounds": args.rounds,
        "ratio": RATIO,
        "machine": machine(),
        "blas": blas,
        "contenders": rows,
        "errors": errors,
    }
    emit(result, args.out)
    if args.plot:
        bar_plot(
            args.plot,
            "MLP 512-1024-1024-10 float32, SGD, batch 256/replica, 2 ranks x 1 thread",
            "samples/s over both ranks (median)",
            {"training": {k: v["samples_per_s"] for k, v in rows.items()}},
            RATIO,
        )


if __name__ == "__main__":
    main()
