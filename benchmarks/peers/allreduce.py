"""All-reduce against the peers: hpcdist, raw mpi4py, torch.distributed (gloo), TensorFlow.

Run (from the peers' venv, see ``scripts/bench_peers.sh``): ``python
benchmarks/peers/allreduce.py [--rounds 5] [--out r.json] [--plot r.png]``. In place, float32,
2 ranks, message sizes 4 KiB to 64 MiB (x4). Each round starts every contender once, in its
own processes (the order rotates from round to round); a contender times ``reps`` back-to-back
calls per size (the same count for all, ``_common.reps_for``) between two of its own barriers.
Medians over rounds; ratios are peer time / hpcdist time within a round, then the median.

- ``hpcdist``: ``Communicator.allreduce_`` (default settings) and ``mpi4py``: raw
  ``Allreduce(MPI.IN_PLACE, x)``, in the same processes, alternating;
- ``torch``: ``torch.distributed.all_reduce`` (in place) on the gloo backend;
- ``tf``: ``ReplicaContext.all_reduce`` inside ``strategy.run`` in a ``tf.function`` under
  ``MultiWorkerMirroredStrategy`` (two workers from TF_CONFIG on localhost ports; TF's
  ``CollectiveReduceV2``, ring over gRPC on CPUs). TF tensors are immutable: it returns a new
  tensor (not in place).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np
from _common import (
    RATIO_NOTE,
    driver_parser,
    emit,
    launch_round,
    loop_time,
    machine,
    pyplot,
    reps_for,
    summarise,
    tf_config,
    worker_rank,
    write_result,
)

NAMES = ("hpcdist", "mpi4py", "torch", "tf")
WORKERS = ("mpi", "torch", "tf")


def sizes(min_kib: int, max_mib: int) -> list[int]:
    out, size = [], min_kib << 10
    while size <= max_mib << 20:
        out.append(size)
        size *= 4
    return out


def check(value: np.ndarray, ranks: int, who: str, rank: int) -> None:
    """Every element must be 1 + 2 + ... + ranks after summing ``rank + 1`` over ranks."""
    want = ranks * (ranks + 1) / 2
    if not np.all(value == want):
        raise SystemExit(f"{who} all-reduce on rank {rank}: expected {want}, got {value[:4]}")


def worker_mpi(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import hpcdist as hd

    comm = hd.Communicator()
    raw = MPI.COMM_WORLD.Dup()
    out: dict[str, Any] = {"hpcdist": {}, "mpi4py": {}}
    for nbytes in sizes(args.min_kib, args.max_mib):
        x = np.full(nbytes // 4, comm.rank + 1, np.float32)
        check(comm.allreduce_(x.copy()), comm.size, "hpcdist", comm.rank)
        y = x.copy()
        raw.Allreduce(MPI.IN_PLACE, y)
        check(y, comm.size, "mpi4py", comm.rank)
        z = np.zeros_like(x)  # in-place sums of zeros stay zero
        reps = reps_for(nbytes)
        out["hpcdist"][nbytes] = loop_time(lambda z=z: comm.allreduce_(z), raw.Barrier, reps)
        out["mpi4py"][nbytes] = loop_time(
            lambda z=z: raw.Allreduce(MPI.IN_PLACE, z), raw.Barrier, reps
        )
    if comm.rank == 0:
        out["versions"] = {"hpcdist": hd.__version__, "mpi": MPI.Get_library_version()[:60]}
        write_result(args.result, out)


def worker_torch(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, size = worker_rank()
    dist.init_process_group("gloo", rank=rank, world_size=size)
    times = {}
    for nbytes in sizes(args.min_kib, args.max_mib):
        x = torch.full((nbytes // 4,), float(rank + 1))
        dist.all_reduce(x)
        check(x.numpy(), size, "torch", rank)
        z = torch.zeros(nbytes // 4)
        times[nbytes] = loop_time(lambda z=z: dist.all_reduce(z), dist.barrier, reps_for(nbytes))
    dist.destroy_process_group()
    if rank == 0:
        write_result(args.result, {"torch": times, "versions": {"torch": torch.__version__}})


def tf_strategy() -> tuple[Any, Any, int, int]:
    """TensorFlow (one thread per pool) and a two-worker MultiWorkerMirroredStrategy."""
    rank, size = worker_rank()
    os.environ["TF_CONFIG"] = tf_config(rank, size)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf, tf.distribute.MultiWorkerMirroredStrategy(), rank, size


def worker_tf(args: argparse.Namespace) -> None:
    tf, strategy, rank, size = tf_strategy()

    @tf.function
    def allreduce(x):
        def fn(x):
            # identity: a tensor placed on this worker's device (the collective needs one)
            return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(x))

        return strategy.run(fn, args=(x,))

    tiny = tf.zeros([1])
    times = {}
    for nbytes in sizes(args.min_kib, args.max_mib):
        check(allreduce(tf.fill([nbytes // 4], float(rank + 1))).numpy(), size, "tf", rank)
        z = tf.zeros([nbytes // 4])
        times[nbytes] = loop_time(
            lambda z=z: allreduce(z), lambda: allreduce(tiny).numpy(), reps_for(nbytes)
        )
    if rank == 0:
        write_result(args.result, {"tf": times, "versions": {"tensorflow": tf.__version__}})


def main() -> None:
    parser = driver_parser(__doc__, WORKERS)
    parser.add_argument("--min-kib", type=int, default=4)
    parser.add_argument("--max-mib", type=int, default=64)
    args = parser.parse_args()
    if args.worker:
        {"mpi": worker_mpi, "torch": worker_torch, "tf": worker_tf}[args.worker](args)
        return

    workers = args.workers.split(",")
    passed = ["--min-kib", str(args.min_kib), "--max-mib", str(args.max_mib)]
    rounds: dict[int, list[dict[str, float]]] = {n: [] for n in sizes(args.min_kib, args.max_mib)}
    errors, versions = [], {}
    for r in range(args.rounds):
        got: dict[str, Any] = {}
        for _, res in launch_round(__file__, workers, r, passed, args.timeout, errors):
            versions.update(res.pop("versions", {}))
            got.update(res)
        for nbytes in rounds:
            rounds[nbytes].append({k: got[k][str(nbytes)] for k in NAMES if k in got})
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for nbytes, per_round in rounds.items():
        row: dict[str, Any] = {"bytes": nbytes, **summarise(per_round, "hpcdist", NAMES)}
        rows.append(row)
        print(
            f"{nbytes:>10} B hpcdist {row.get('hpcdist', {}).get('median_s', 0) * 1e6:9.1f} us  "
            + "  ".join(f"{k} {row[k]['ratio']:.2f}x" for k in NAMES if "ratio" in row.get(k, {})),
            file=sys.stderr,
        )
    result = {
        "benchmark": "peers_allreduce",
        "ranks": 2,
        "dtype": "float32",
        "in_place": {"hpcdist": True, "mpi4py": True, "torch": True, "tf": False},
        "rounds": args.rounds,
        "ratio": RATIO_NOTE,
        "machine": machine(),
        "versions": versions,
        "sizes": rows,
        "errors": errors,
    }
    emit(result, args.out)
    if args.plot:
        plot(result, args.plot)


def plot(result: dict[str, Any], path: str) -> None:
    """Bus bandwidth against message size, one line per contender."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in NAMES:
        pts = [(r["bytes"], r[name]["median_s"]) for r in result["sizes"] if name in r]
        if pts:
            ax.plot(
                [b for b, _ in pts], [b / t / 1e9 for b, t in pts], marker="o", label=name
            )  # 2 ranks: bus bandwidth 2 (n-1)/n * bytes / time = bytes / time
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("in-place all-reduce, 2 ranks, float32, 1 thread/process (medians)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
