"""Training throughput: weak scaling of Model.fit's step and hpcdist's overhead over plain numpy.

Run: ``mpiexec -n 2 python benchmarks/train_scaling.py [--out results.json]`` (also works on 1
rank). One BLAS thread per rank. Compute-bound MLP (512-1024-1024-10, float32), SGD, a fixed
per-replica batch (weak scaling). Measured in one run, in interleaved rounds, medians:

- ``distributed``: steps of a MultiWorkerMirroredStrategy model on all ranks (global batch =
  per-replica batch x ranks): samples/s over all ranks;
- ``single``: the same model under the default strategy on rank 0 alone (others wait);
- ``numpy``: the same MLP written by hand in numpy (forward, backward, SGD) on rank 0 alone.

Weak-scaling efficiency = distributed samples/s / (ranks x single samples/s); hpcdist overhead
= single step time / numpy step time - 1.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, median_time  # noqa: E402

import hpcdist as hd  # noqa: E402

SIZES = (512, 1024, 1024, 10)


def build(strategy):
    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(SIZES[1], activation="relu", input_shape=(SIZES[0],)),
                hd.nn.layers.Dense(SIZES[2], activation="relu"),
                hd.nn.layers.Dense(SIZES[3]),
            ]
        )
        model.compile(
            optimizer=hd.nn.optimizers.SGD(0.01),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def numpy_mlp(weights, lr=0.01, xp=np):
    """The same network trained by hand in ``xp`` (numpy or CuPy): returns ``step(x, y)``."""
    w1, b1, w2, b2, w3, b3 = (xp.array(w, copy=True) for w in weights)

    def step(x, y):
        nonlocal w1, b1, w2, b2, w3, b3
        n = len(x)
        z1 = x @ w1 + b1
        h1 = xp.maximum(z1, 0)
        z2 = h1 @ w2 + b2
        h2 = xp.maximum(z2, 0)
        logits = h2 @ w3 + b3
        shifted = logits - logits.max(1, keepdims=True)
        p = xp.exp(shifted)
        p /= p.sum(1, keepdims=True)
        g3 = p
        g3[xp.arange(n), y] -= 1
        g3 /= n
        gw3, gb3 = h2.T @ g3, g3.sum(0)
        g2 = (g3 @ w3.T) * (z2 > 0)
        gw2, gb2 = h1.T @ g2, g2.sum(0)
        g1 = (g2 @ w2.T) * (z1 > 0)
        gw1, gb1 = x.T @ g1, g1.sum(0)
        for w, g in ((w1, gw1), (b1, gb1), (w2, gw2), (b2, gb2), (w3, gw3), (b3, gb3)):
            w -= lr * g

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-replica-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    n, b = comm.size, args.per_replica_batch
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b * n * args.steps, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[3], len(x))

    strategy = hd.MultiWorkerMirroredStrategy()
    model = build(strategy)
    model.fit(
        x[: b * n], y[: b * n], batch_size=b * n, epochs=1, verbose=0, shuffle=False
    )  # warm-up
    xs, ys = x[: b * args.steps], y[: b * args.steps]
    if comm.rank == 0:
        single = build(hd.get_strategy())
        single.fit(xs[:b], ys[:b], batch_size=b, epochs=1, verbose=0, shuffle=False)
        step = numpy_mlp(single.get_weights())

        def numpy_epoch():
            for i in range(args.steps):
                step(xs[i * b : (i + 1) * b], ys[i * b : (i + 1) * b])

    # Interleaved rounds: distributed on all ranks, then single and numpy on rank 0 alone.
    dist, singles, numpys = [], [], []
    for _ in range(args.rounds):
        comm.Barrier()
        dist.append(
            median_time(
                lambda: model.fit(x, y, batch_size=b * n, epochs=1, verbose=0, shuffle=False), 1
            )
            / args.steps
        )
        comm.Barrier()
        if comm.rank == 0:
            singles.append(
                median_time(
                    lambda: single.fit(xs, ys, batch_size=b, epochs=1, verbose=0, shuffle=False), 1
                )
                / args.steps
            )
            numpys.append(median_time(numpy_epoch, 1) / args.steps)
        comm.Barrier()
    dist_s = float(np.median(dist))
    single_s, numpy_s = comm.bcast(
        (float(np.median(singles)), float(np.median(numpys))) if comm.rank == 0 else None, root=0
    )
    result = {
        "benchmark": "train_scaling",
        "ranks": n,
        "per_replica_batch": b,
        "layers": SIZES,
        "distributed_step_s": dist_s,
        "distributed_samples_per_s": b * n / dist_s,
        "single_step_s": single_s,
        "single_samples_per_s": b / single_s,
        "numpy_step_s": numpy_s,
        "weak_scaling_efficiency": (b * n / dist_s) / (n * b / single_s),
        "overhead_vs_numpy": single_s / numpy_s - 1,
    }
    if comm.rank == 0:
        print(
            f"{n} rank(s): {result['distributed_samples_per_s']:.0f} samples/s; single "
            f"{result['single_samples_per_s']:.0f} samples/s; efficiency "
            f"{result['weak_scaling_efficiency'] * 100:.1f}%; overhead vs numpy "
            f"{result['overhead_vs_numpy'] * 100:+.1f}%",
            file=sys.stderr,
        )
    emit(result, args.out)


if __name__ == "__main__":
    main()
