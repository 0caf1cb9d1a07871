"""Fusion of many small all-reduces against the peers: 200 float32 tensors of 1-64 KiB, 2 ranks.

Run (from the peers' venv, see ``scripts/bench_peers.sh``): ``python benchmarks/peers/fusion.py
[--rounds 5] [--out r.json] [--plot r.png]``. The same 200 sizes on every rank and contender
(seeded). Each round starts every contender once, in its own processes (the order rotates); a
contender times ``--reps`` back-to-back reductions of the whole list between two of its own
barriers. Medians over rounds; ratios are peer time / hpcdist time within a round.

- ``hpcdist``: ``Communicator.grouped_allreduce`` (default ``bytes_per_pack``; returns new
  arrays);
- ``mpi4py_packed``: the same by hand with raw mpi4py: concatenate, one in-place
  ``Allreduce``, split (a reference for what fusion can reach);
- ``torch_bucketed``: DDP's scheme: flatten into buckets of at most 25 MiB (DDP's
  ``bucket_cap_mb`` default), one gloo ``all_reduce`` per bucket, copy back into the tensors;
- ``torch_coalesced``: ``torch.distributed.all_reduce_coalesced`` where it exists;
- ``tf_batch``: ``ReplicaContext.all_reduce`` of the list inside ``strategy.run`` in a
  ``tf.function`` under ``MultiWorkerMirroredStrategy`` (TF's batch all-reduce: it packs the
  tensors, ``bytes_per_pack`` default, into ``CollectiveReduceV2`` calls).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from _common import (
    RATIO_NOTE,
    bar_plot,
    collect_rounds,
    driver_parser,
    emit,
    loop_time,
    machine,
    summarise,
    worker_rank,
    write_result,
)
from allreduce import tf_strategy

NAMES = ("hpcdist", "mpi4py_packed", "torch_bucketed", "torch_coalesced", "tf_batch")
WORKERS = ("mpi", "torch", "tf")
DDP_BUCKET_BYTES = 25 << 20


def tensor_sizes(count: int) -> list[int]:
    """Element counts of ``count`` float32 tensors of 1-64 KiB (the same everywhere)."""
    return [int(k) * 256 for k in np.random.default_rng(0).integers(1, 65, count)]


def check(values: list[Any], ranks: int, who: str, rank: int) -> None:
    """Every tensor must hold 1 + ... + ranks after summing ``rank + 1``."""
    want = ranks * (ranks + 1) / 2
    for i, v in enumerate(values):
        if not np.all(np.asarray(v) == want):
            raise SystemExit(f"{who} on rank {rank}: tensor {i}: expected {want}, got {v[:4]}")


def worker_mpi(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import hpcdist as hd

    comm = hd.Communicator()
    raw = MPI.COMM_WORLD.Dup()
    counts = tensor_sizes(args.tensors)
    ones = [np.full(c, comm.rank + 1, np.float32) for c in counts]
    splits = np.cumsum(counts)[:-1]

    def packed(xs: list[np.ndarray]) -> list[np.ndarray]:
        flat = np.concatenate(xs)
        raw.Allreduce(MPI.IN_PLACE, flat)
        return np.split(flat, splits)

    check(comm.grouped_allreduce(ones), comm.size, "hpcdist", comm.rank)
    check(packed(ones), comm.size, "mpi4py_packed", comm.rank)
    xs = [np.zeros(c, np.float32) for c in counts]
    out = {
        "hpcdist": loop_time(lambda: comm.grouped_allreduce(xs), raw.Barrier, args.reps),
        "mpi4py_packed": loop_time(lambda: packed(xs), raw.Barrier, args.reps),
    }
    if comm.rank == 0:
        out["total_bytes"] = int(sum(counts) * 4)
        write_result(args.result, out)


def worker_torch(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, size = worker_rank()
    dist.init_process_group("gloo", rank=rank, world_size=size)
    counts = tensor_sizes(args.tensors)
    buckets: list[list[int]] = [[]]
    filled = 0
    for i, c in enumerate(counts):  # DDP fills buckets in order up to bucket_cap_mb
        if buckets[-1] and filled + 4 * c > DDP_BUCKET_BYTES:
            buckets.append([])
            filled = 0
        buckets[-1].append(i)
        filled += 4 * c

    def bucketed(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        for bucket in buckets:
            flat = torch.cat([xs[i] for i in bucket])
            dist.all_reduce(flat)
            for i, part in zip(bucket, flat.split([counts[i] for i in bucket]), strict=True):
                xs[i].copy_(part)
        return xs

    ones = [torch.full((c,), float(rank + 1)) for c in counts]
    check([t.numpy() for t in bucketed([t.clone() for t in ones])], size, "torch", rank)
    xs = [torch.zeros(c) for c in counts]
    out: dict[str, Any] = {
        "torch_bucketed": loop_time(lambda: bucketed(xs), dist.barrier, args.reps),
        "buckets": len(buckets),
    }
    if hasattr(dist, "all_reduce_coalesced"):
        try:
            two = [t.clone() for t in ones]
            dist.all_reduce_coalesced(two)
            check([t.numpy() for t in two], size, "torch all_reduce_coalesced", rank)
            out["torch_coalesced"] = loop_time(
                lambda: dist.all_reduce_coalesced(xs), dist.barrier, args.reps
            )
        except (RuntimeError, ValueError) as exc:
            out["torch_coalesced_error"] = repr(exc)[:200]
    dist.destroy_process_group()
    if rank == 0:
        write_result(args.result, out)


def worker_tf(args: argparse.Namespace) -> None:
    tf, strategy, rank, size = tf_strategy()

    @tf.function
    def batch(xs):
        def fn(xs):
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce("sum", [tf.identity(x) for x in xs])

        return strategy.run(fn, args=(xs,))

    counts = tensor_sizes(args.tensors)
    check(
        [t.numpy() for t in batch([tf.fill([c], float(rank + 1)) for c in counts])],
        size,
        "tf",
        rank,
    )
    xs = [tf.zeros([c]) for c in counts]
    tiny = [tf.zeros([1])]
    seconds = loop_time(lambda: batch(xs), lambda: batch(tiny)[0].numpy(), args.reps)
    if rank == 0:
        write_result(args.result, {"tf_batch": seconds})


def main() -> None:
    parser = driver_parser(__doc__, WORKERS)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--reps", type=int, default=20, help="reductions per timing")
    args = parser.parse_args()
    if args.worker:
        {"mpi": worker_mpi, "torch": worker_torch, "tf": worker_tf}[args.worker](args)
        return

    passed = ["--tensors", str(args.tensors), "--reps", str(args.reps)]
    rounds, errors, extra = collect_rounds(__file__, args, passed, NAMES)
    rows = summarise(rounds, "hpcdist", NAMES)
    result = {
        "benchmark": "peers_fusion",
        "ranks": 2,
        "tensors": args.tensors,
        "reps_per_timing": args.reps,
        "rounds": args.rounds,
        "ratio": RATIO_NOTE,
        "machine": machine(),
        **extra,
        "contenders": rows,
        "errors": errors,
    }
    emit(result, args.out)
    if args.plot:
        bar_plot(
            args.plot,
            f"{args.tensors} float32 tensors of 1-64 KiB "
            f"({extra.get('total_bytes', 0) / 2**20:.1f} MiB), 2 ranks: one fused all-reduce",
            "milliseconds per all-reduce of the list (median)",
            {"time": {k: v["median_s"] * 1e3 for k, v in rows.items()}},
            RATIO_NOTE,
        )


if __name__ == "__main__":
    main()
