"""Soak: a long random mix of collectives, each result checked against numpy.

Run: ``mpiexec -n 2 python tests/soak/soak_collectives.py [--count N]`` (``make soak`` runs it).
Every rank draws the same sequence of collectives (kind, op, dtype, shapes) from a seeded
generator, and can generate every rank's input, so each result is checked locally against numpy.
Prints JSON on rank 0: collectives run, wrong results (must be 0), and resident memory at the
end of the warm-up and at the end, per rank.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from memory import rss_mib

import hpcdist as hd

KINDS = [
    "allreduce",
    "allreduce_",
    "grouped_allreduce",
    "allreduce_async",
    "broadcast",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "allgather_object",
    "broadcast_object",
]
OPS = ["sum", "mean", "min", "max", "prod"]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


def data(step: int, rank: int, shape: tuple[int, ...], dtype: type, op: str) -> np.ndarray:
    """Rank ``rank``'s input of collective ``step`` (any rank can compute it)."""
    rng = np.random.default_rng([step, rank])
    if op == "prod":  # stay far from overflow and underflow
        values = rng.choice([1, 1, 1, 2, -1], size=shape)
    elif np.dtype(dtype).kind == "i":
        values = rng.integers(-1000, 1000, size=shape)
    else:
        values = rng.standard_normal(shape)
    return values.astype(dtype)


def reduce(arrays: list[np.ndarray], op: str) -> np.ndarray:
    """What a reduction of ``arrays`` gives (MEAN of integers rounds down, as hpcdist's)."""
    stacked = np.stack([a.astype(np.float64) for a in arrays])
    dtype = arrays[0].dtype
    if op == "mean":
        total = stacked.sum(0)
        out = total / len(arrays) if dtype.kind == "f" else np.floor_divide(total, len(arrays))
    else:
        out = {"sum": stacked.sum, "min": stacked.min, "max": stacked.max, "prod": stacked.prod}[
            op
        ](0)
    return out.astype(dtype)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values, shapes and dtypes (floats within their rounding)."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype.kind == "f":
        tol = 1e-4 if want.dtype == np.float32 else 1e-10
        return bool(np.allclose(got, want, rtol=tol, atol=tol))
    return bool(np.array_equal(got, want))


def one(comm: hd.comm.Communicator, step: int) -> bool:
    """Run collective ``step`` of the sequence; return whether its result is right."""
    rng = np.random.default_rng([step, 1 << 20])
    size, rank = comm.size, comm.rank
    kind = KINDS[rng.integers(len(KINDS))]
    op = OPS[rng.integers(len(OPS))]
    dtype = DTYPES[rng.integers(len(DTYPES))]
    n = int(rng.choice([1, 7, 64, 1000, 4097, 70000], p=[0.2, 0.2, 0.25, 0.2, 0.1, 0.05]))
    everyone = [data(step, r, (n,), dtype, op) for r in range(size)]
    mine = everyone[rank]
    if kind == "allreduce":
        return same(comm.allreduce(mine, op), reduce(everyone, op))
    if kind == "allreduce_":
        buf = mine.copy()
        comm.allreduce_(buf, op)
        return same(buf, reduce(everyone, op))
    if kind == "allreduce_async":
        return same(comm.allreduce_async(mine, op).wait(), reduce(everyone, op))
    if kind == "grouped_allreduce":
        parts = [1, max(1, n // 3), n]
        pieces = [
            [data(step * 7 + i, r, (m,), dtype, op) for r in range(size)]
            for i, m in enumerate(parts)
        ]
        got = comm.grouped_allreduce([p[rank] for p in pieces], op)
        return all(same(g, reduce(p, op)) for g, p in zip(got, pieces, strict=True))
    if kind == "broadcast":
        root = int(rng.integers(size))
        return same(comm.broadcast(mine, root=root), everyone[root])
    if kind == "allgather":
        rows = [1 + (step + r) % 5 for r in range(size)]
        blocks = [data(step, r, (rows[r], 3), dtype, op) for r in range(size)]
        return same(comm.allgather(blocks[rank]), np.concatenate(blocks))
    if kind == "reduce_scatter":
        rows = n % 11 + size
        blocks = [data(step, r, (rows, 2), dtype, op) for r in range(size)]
        total = reduce(blocks, op)
        base, extra = divmod(rows, size)
        start = rank * base + min(rank, extra)
        stop = start + base + (1 if rank < extra else 0)
        return same(comm.reduce_scatter(blocks[rank], op), total[start:stop])
    if kind == "alltoall":
        splits = [[(src + dst + step) % 4 for dst in range(size)] for src in range(size)]
        blocks = [data(step, src, (sum(splits[src]), 2), dtype, op) for src in range(size)]
        want = []
        for src in range(size):
            offset = sum(splits[src][:rank])
            want.append(blocks[src][offset : offset + splits[src][rank]])
        return same(comm.alltoall(blocks[rank], splits[rank]), np.concatenate(want))
    if kind == "allgather_object":
        got = comm.allgather_object({"rank": rank, "step": step, "head": mine[:3].tolist()})
        return got == [
            {"rank": r, "step": step, "head": everyone[r][:3].tolist()} for r in range(size)
        ]
    root = int(rng.integers(size))
    got = comm.broadcast_object((step, everyone[rank][:2].tolist()), root=root)
    return got == (step, everyone[root][:2].tolist())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    args = parser.parse_args()
    comm = hd.comm.world()
    wrong = []
    start = time.perf_counter()
    rss_warm = rss_mib()
    for step in range(args.count):
        if step == args.warmup:
            rss_warm = rss_mib()
        if not one(comm, step):
            wrong.append(step)
    elapsed = time.perf_counter() - start
    rss = comm.allgather_object((rss_warm, rss_mib(), len(wrong), wrong[:10]))
    if comm.rank == 0:
        report = {
            "soak": "collectives",
            "ranks": comm.size,
            "collectives": args.count,
            "seconds": round(elapsed, 1),
            "wrong_results": sum(r[2] for r in rss),
            "first_wrong_steps": sorted({s for r in rss for s in r[3]})[:10],
            "rss_mib_after_warmup": [round(r[0], 1) for r in rss],
            "rss_mib_at_end": [round(r[1], 1) for r in rss],
            "rss_growth_mib": [round(r[1] - r[0], 1) for r in rss],
        }
        print(json.dumps(report, indent=1))
    return 1 if any(r[2] for r in rss) else 0


if __name__ == "__main__":
    sys.exit(main())
