"""Start-up time and the MPI operations each rank starts per checked all-reduce and checkpoint.

Run with ``HPCDIST_COUNT_MESSAGES=1``; ``HPCDIST_RANKS_PER_NODE=1`` puts every rank on a node
of its own, so collectives take the across-nodes path (header check, then the MPI payload)
that a multi-node job takes. argv: a shared directory for the checkpoint.

Prints ``SCALE {json}`` on rank 0 with, per case, the counts of every rank (``{kind: [calls,
bytes]}``; the cases' counts must be the same on every rank, or the line lists each rank's)
and the start-up time (process start to the end of the first collective: its median and
maximum over ranks, and the medians of its parts: start + import (MPI's initialisation
included), world communicator, first collective, and the CPU seconds spent by then).
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
from common import process_start, report

import hpcdist as hd
from hpcdist.comm import counters  # loads mpi4py, which initialises MPI

imported = time.time()
directory = sys.argv[1]
assert counters.COUNTING, "run with HPCDIST_COUNT_MESSAGES=1"
comm = hd.comm.world()
created = time.time()
comm.barrier()  # the first collective
done = time.time()
at_startup = {k: list(v) for k, v in counters.snapshot().items()}
started = process_start()
usage = resource.getrusage(resource.RUSAGE_SELF)
phases = {
    "startup": done - started,
    "import": imported - started,
    "world": created - imported,
    "first": done - created,
    "cpu": usage.ru_utime + usage.ru_stime,
}
mpi = hd.CommunicationOptions(implementation="mpi")


def counted(fn) -> dict[str, list[int]]:
    before = counters.snapshot()
    fn()
    return {k: list(v) for k, v in counters.total(before, counters.snapshot()).items()}


def mismatch() -> None:
    shape = (5,) if comm.rank == comm.size - 1 else (4,)
    try:
        comm.allreduce(np.ones(shape, np.float32))
    except hd.errors.CollectiveMismatchError:
        return
    raise AssertionError(f"rank {comm.rank}: no CollectiveMismatchError")


def poisoned() -> None:
    x = np.array(["a"]) if comm.rank == 1 else np.ones(1, np.float32)
    try:
        comm.allreduce(x)
    except (TypeError, hd.errors.CollectiveMismatchError):
        return
    raise AssertionError(f"rank {comm.rank}: a poisoned all-reduce did not raise")


strategy = hd.MultiWorkerMirroredStrategy()
with strategy.scope():
    weights = strategy.Variable(np.zeros((64, 64), np.float32))
checkpoint = hd.Checkpoint(weights=weights)
prefix = f"{directory}/ckpt"
checkpoint.save(prefix)  # the first save opens what later saves reuse

cases = {
    "allreduce_4KiB": lambda: comm.allreduce(np.ones(1024, np.float32)),
    "allreduce_1MiB": lambda: comm.allreduce(np.ones(1 << 18, np.float32)),
    "allreduce_4KiB_mpi_impl": lambda: comm.allreduce(np.ones(1024, np.float32), options=mpi),
    "mismatch": mismatch,
    "poisoned": poisoned,
    "barrier": comm.barrier,
    "checkpoint_save": lambda: checkpoint.save(prefix),
}
results = {}
for name, fn in cases.items():
    fn()  # warm: the counts below are those of a steady-state call
    results[name] = counted(fn)
every = comm.allgather_object({"counts": results, "at_startup": at_startup, **phases})
per_case = {}
for name in cases:
    seen = [e["counts"][name] for e in every]
    per_case[name] = seen[0] if all(s == seen[0] for s in seen) else {"per_rank": seen}
medians = {}
for phase in phases:
    values = sorted(e[phase] for e in every)
    medians[f"{phase}_median"] = round(values[len(values) // 2], 3)
report(
    comm,
    "counts",
    counts=per_case,
    startup_max=round(max(e["startup"] for e in every), 3),
    announcing_ranks=sum(1 for e in every if "p2p.announce" in e["at_startup"]),
    startup_counts_rank0=every[0]["at_startup"],
    **medians,
)
