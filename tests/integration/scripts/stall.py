"""The last rank arrives late at an all-reduce; argv[1] = how late (s), argv[2] = implementation."""

import sys
import time

import numpy as np

import hpcdist as hd

late, impl = float(sys.argv[1]), sys.argv[2]
comm = hd.comm.world()
comm.barrier()
if comm.rank == comm.size - 1:
    time.sleep(late)
try:
    out = comm.allreduce(np.ones(8), options=hd.CommunicationOptions(implementation=impl))
    print(f"rank {comm.rank} result {out[0]}", flush=True)
except hd.errors.DeadlineExceededError as exc:
    print(
        f"rank {comm.rank} DeadlineExceededError missing={list(exc.missing_ranks)}: {exc}",
        flush=True,
    )
    try:
        comm.allreduce(np.ones(8))
    except hd.errors.UnavailableError as again:
        print(f"rank {comm.rank} then UnavailableError: {again}", flush=True)
    time.sleep(3)  # let the other waiting ranks reach their own deadline before aborting
    raise
