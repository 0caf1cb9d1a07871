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

``--overlap`` times the distributed step twice per round, with the gradient all-reduce
overlapped with the backward pass (``HPCDIST_OVERLAP_GRADIENTS=1``, buckets of
``--bucket-bytes``) and without it (``0``), in alternating order: ``overlap_speedup`` = median
step time without / median step time with (above 1: overlap wins), with the median of the
per-round ratios beside it. ``--layers 512,2048,2048,2048,10`` trains another MLP; ``--no-single``
skips the one-rank contenders. The JSON names the BLAS library and the kernel that ran
(threadpoolctl's ``architecture``, which ``OPENBLAS_CORETYPE`` pins).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, median_time  # noqa: E402

import hpcdist as hd  # noqa: E402
from hpcdist.settings import get_settings  # noqa: E402

SIZES = (512, 1024, 1024, 10)


def build(strategy, sizes=SIZES):
    hd.nn.set_random_seed(0)
    with strategy.scope():
        hidden = [hd.nn.layers.Dense(sizes[1], activation="relu", input_shape=(sizes[0],))]
        hidden += [hd.nn.layers.Dense(width, activation="relu") for width in sizes[2:-1]]
        model = hd.nn.Sequential([*hidden, hd.nn.layers.Dense(sizes[-1])])
        model.compile(
            optimizer=hd.nn.optimizers.SGD(0.01),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def numpy_mlp(weights, lr=0.01, xp=np):
    """The same network trained by hand in ``xp`` (numpy or CuPy): returns ``step(x, y)``.

    ``weights`` alternate kernel and bias; every layer but the last is ReLU.
    """
    params = [xp.array(w, copy=True) for w in weights]
    kernels, biases = params[0::2], params[1::2]

    def step(x, y):
        n = len(x)
        inputs, pre = [], []
        h = x
        for i, (w, b) in enumerate(zip(kernels, biases, strict=True)):
            inputs.append(h)
            z = h @ w + b
            pre.append(z)
            h = xp.maximum(z, 0) if i < len(kernels) - 1 else z
        shifted = h - h.max(1, keepdims=True)
        p = xp.exp(shifted)
        p /= p.sum(1, keepdims=True)
        g = p
        g[xp.arange(n), y] -= 1
        g /= n
        for i in reversed(range(len(kernels))):
            gw, gb = inputs[i].T @ g, g.sum(0)
            if i:
                g = (g @ kernels[i].T) * (pre[i - 1] > 0)
            kernels[i] -= lr * gw
            biases[i] -= lr * gb

    return step


def blas_info():
    """The BLAS library numpy calls and the kernel it runs (threadpoolctl's view)."""
    found = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    info = found[0] if found else {}
    return {
        "library": info.get("internal_api"),
        "version": info.get("version"),
        "architecture": info.get("architecture"),
        "threads": info.get("num_threads"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    }


def slowest(comm, times):
    """Each entry of ``times`` as its maximum over the ranks."""
    mine = np.array(times, dtype=np.float64)
    out = np.empty_like(mine)
    comm.Allreduce(mine, out, op=MPI.MAX)
    return out


def set_overlap(enabled):
    """Switch the overlapped gradient all-reduce for the next steps (every rank alike)."""
    os.environ["HPCDIST_OVERLAP_GRADIENTS"] = "1" if enabled else "0"
    get_settings(refresh=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-replica-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layers", default=",".join(map(str, SIZES)), help="MLP widths")
    parser.add_argument("--overlap", action="store_true", help="time overlap on and off")
    parser.add_argument("--bucket-bytes", type=int, help="HPCDIST_OVERLAP_BUCKET_BYTES")
    parser.add_argument("--no-single", action="store_true", help="skip single and numpy")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = tuple(int(w) for w in args.layers.split(","))
    if args.bucket_bytes is not None:
        os.environ["HPCDIST_OVERLAP_BUCKET_BYTES"] = str(args.bucket_bytes)
        get_settings(refresh=True)
    default_overlap = get_settings().overlap_gradients

    comm = MPI.COMM_WORLD
    n, b = comm.size, args.per_replica_batch
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b * n * args.steps, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], len(x))

    strategy = hd.MultiWorkerMirroredStrategy()
    model = build(strategy, sizes)

    def dist_epoch():
        model.fit(x, y, batch_size=b * n, epochs=1, verbose=0, shuffle=False)

    for enabled in (False, True) if args.overlap else (default_overlap,):  # warm-up
        set_overlap(enabled)
        model.fit(x[: b * n], y[: b * n], batch_size=b * n, epochs=1, verbose=0, shuffle=False)
    set_overlap(default_overlap)
    xs, ys = x[: b * args.steps], y[: b * args.steps]
    single_runs = comm.rank == 0 and not args.no_single
    if single_runs:
        single = build(hd.get_strategy(), sizes)
        single.fit(xs[:b], ys[:b], batch_size=b, epochs=1, verbose=0, shuffle=False)
        step = numpy_mlp(single.get_weights())

        def numpy_epoch():
            for i in range(args.steps):
                step(xs[i * b : (i + 1) * b], ys[i * b : (i + 1) * b])

    # Interleaved rounds: distributed on all ranks (overlap off and on, alternating which goes
    # first), then single and numpy on rank 0 alone.
    dist, singles, numpys = [], [], []
    timed = {False: [], True: []}
    for r in range(args.rounds):
        comm.Barrier()
        if args.overlap:
            for enabled in (r % 2 == 0, r % 2 == 1):
                set_overlap(enabled)
                comm.Barrier()
                timed[enabled].append(median_time(dist_epoch, 1) / args.steps)
            set_overlap(default_overlap)
            dist.append(timed[default_overlap][-1])
        else:
            dist.append(median_time(dist_epoch, 1) / args.steps)
        comm.Barrier()
        if single_runs:
            singles.append(
                median_time(
                    lambda: single.fit(xs, ys, batch_size=b, epochs=1, verbose=0, shuffle=False), 1
                )
                / args.steps
            )
            numpys.append(median_time(numpy_epoch, 1) / args.steps)
        comm.Barrier()
    # The slowest rank's times: every rank reports the same numbers.
    dist = slowest(comm, dist)
    dist_s = float(np.median(dist))
    result = {
        "benchmark": "train_scaling",
        "ranks": n,
        "per_replica_batch": b,
        "layers": sizes,
        "parameters": int(sum(a * c + c for a, c in itertools.pairwise(sizes))),
        "blas": blas_info(),
        "overlap_default": default_overlap,
        "overlap_bucket_bytes": get_settings().overlap_bucket_bytes,
        "distributed_step_s": dist_s,
        "distributed_samples_per_s": b * n / dist_s,
    }
    if not args.no_single:
        single_s, numpy_s = comm.bcast(
            (float(np.median(singles)), float(np.median(numpys))) if comm.rank == 0 else None, 0
        )
        result.update(
            single_step_s=single_s,
            single_samples_per_s=b / single_s,
            numpy_step_s=numpy_s,
            weak_scaling_efficiency=(b * n / dist_s) / (n * b / single_s),
            overhead_vs_numpy=single_s / numpy_s - 1,
        )
    if args.overlap:
        off, on = slowest(comm, timed[False]), slowest(comm, timed[True])
        result.update(
            no_overlap_step_s=float(np.median(off)),
            overlap_step_s=float(np.median(on)),
            overlap_speedup=float(np.median(off) / np.median(on)),
            overlap_speedup_per_round_median=float(np.median(off / on)),
            no_overlap_rounds_s=[round(float(t), 5) for t in off],
            overlap_rounds_s=[round(float(t), 5) for t in on],
        )
    if comm.rank == 0:
        line = f"{n} rank(s): {result['distributed_samples_per_s']:.0f} samples/s"
        if not args.no_single:
            line += (
                f"; single {result['single_samples_per_s']:.0f} samples/s; efficiency "
                f"{result['weak_scaling_efficiency'] * 100:.1f}%; overhead vs numpy "
                f"{result['overhead_vs_numpy'] * 100:+.1f}%"
            )
        if args.overlap:
            line += f"; overlap speedup {result['overlap_speedup']:.3f}"
        print(line, file=sys.stderr)
    emit(result, args.out)


if __name__ == "__main__":
    main()
