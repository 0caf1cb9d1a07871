"""The link between two nodes: ping-pong times, then hpcdist's checked all-reduce, for a model.

Run across two nodes (``bash scripts/twonode.sh run 1+1 python tests/scale/scripts/link.py``):
ranks 0 and 1 bounce raw mpi4py messages of 8 B to 16 MiB (median of repetitions; one way =
half a round trip), then both all-reduce float32 arrays of 4 KiB to 16 MiB with hpcdist (the
header check and the payload, what a gradient all-reduce costs) and with raw
``MPI.Allreduce``. Rank 0 prints ``SCALE {json}`` with every median, in seconds.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

import hpcdist as hd

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
assert size == 2, f"link.py runs on 2 ranks (one per node), got {size}"
peer = 1 - rank


def median_time(fn, budget: float = 0.6, least: int = 5) -> float:
    """Median seconds of ``fn()`` over repetitions filling about ``budget`` seconds.

    Rank 0 decides when to stop (both ranks must run ``fn`` as often), outside the timing.
    """
    times: list[float] = []
    start = time.perf_counter()
    while True:
        world.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        enough = len(times) >= 2000 or (
            len(times) >= least and time.perf_counter() - start >= budget
        )
        if world.bcast(enough, root=0):
            return float(np.median(times))


def pingpong(buf: np.ndarray) -> None:
    if rank == 0:
        world.Send(buf, dest=peer, tag=7)
        world.Recv(buf, source=peer, tag=7)
    else:
        world.Recv(buf, source=peer, tag=7)
        world.Send(buf, dest=peer, tag=7)


one_way = {}
for nbytes in [8, 64, 512, 4096, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]:
    buf = np.zeros(nbytes, np.uint8)
    pingpong(buf)  # warm
    one_way[nbytes] = median_time(lambda b=buf: pingpong(b)) / 2
    if rank == 0:
        print(f"one way {nbytes} B: {one_way[nbytes] * 1e6:.1f} us", file=sys.stderr, flush=True)
comm = hd.comm.world()
checked, raw = {}, {}
for nbytes in [4096, 64 << 10, 1 << 20, 4 << 20, 16 << 20]:
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    comm.allreduce_(x)  # warm
    checked[nbytes] = median_time(lambda x=x: comm.allreduce_(x))
    raw[nbytes] = median_time(lambda x=x, y=y: world.Allreduce(x, y))
    if rank == 0:
        print(f"all-reduce {nbytes} B: {checked[nbytes] * 1e6:.0f} us", file=sys.stderr, flush=True)
if rank == 0:
    print(
        "SCALE "
        + json.dumps(
            {
                "case": "link",
                "nodes": comm.num_nodes,
                "one_way_s": one_way,
                "checked_allreduce_s": checked,
                "raw_allreduce_s": raw,
            }
        ),
        flush=True,
    )
