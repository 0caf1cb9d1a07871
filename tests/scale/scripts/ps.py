"""Parameter server: schedule and join F functions; results and ps variables must be exact.

argv: F (functions), DIRECTORY. ``HPCDIST_NUM_PS`` sets the ps count (rank 0 coordinates, the
rest are workers). Each function adds 1 to a scalar and to every row of a variable sharded over
every ps, and returns ``i * i``: after `join`, the scalar is F, every row is F, and the fetched
results are ``i * i`` for each i.

Every rank writes ``DIRECTORY/counts-RANK.json`` with its role and peak memory (workers and ps
ranks at exit: they leave from inside the strategy); with ``HPCDIST_COUNT_MESSAGES=1`` also its
counts (the coordinator's: those of its scheduling and joining alone).
"""

from __future__ import annotations

import atexit
import json
import sys

import numpy as np
from common import max_rss_mib, since_start
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm import counters

functions, directory = int(sys.argv[1]), sys.argv[2]
rank = MPI.COMM_WORLD.Get_rank()


def dump(role: str = "server") -> None:
    counts = counters.snapshot() if counters.COUNTING else {}
    with open(f"{directory}/counts-{rank}.json", "w") as f:
        json.dump({"role": role, "counts": counts, "rss_mib": max_rss_mib()}, f)


atexit.register(dump)
num_ps = int(hd.settings.get_settings().num_ps or 1)
strategy = hd.ParameterServerStrategy(
    variable_partitioner=hd.partitioners.FixedShardsPartitioner(num_shards=num_ps)
)
atexit.unregister(dump)  # only the coordinator gets here
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    total = strategy.Variable(0.0)
    rows = strategy.Variable(np.zeros((4 * num_ps, 8), np.float32))
shards = len(rows.variables) if hasattr(rows, "variables") else 1


def step(i: int) -> int:
    total.assign_add(1.0)
    rows.assign_add(np.ones((4 * num_ps, 8), np.float32))
    return i * i


coordinator.schedule(step, args=(0,)).fetch()  # warm: the function is sent once
before = counters.snapshot()
values = [coordinator.schedule(step, args=(i,)) for i in range(functions)]
coordinator.join()
results = [v.fetch() for v in values]
spent = counters.total(before, counters.snapshot())
assert results == [i * i for i in range(functions)], "results differ from i * i"
assert float(total.numpy()) == functions + 1, (float(total.numpy()), functions + 1)
assert np.array_equal(rows.numpy(), np.full((4 * num_ps, 8), functions + 1.0)), rows.numpy()
workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
with open(f"{directory}/counts-{rank}.json", "w") as f:
    json.dump({"role": "coordinator", "counts": spent, "rss_mib": max_rss_mib()}, f)
print(
    "SCALE "
    + json.dumps(
        {
            "case": "ps",
            "ps": num_ps,
            "workers": workers,
            "functions": functions,
            "shards": shards,
            "coordinator_rss_mib": round(max_rss_mib(), 1),
            "seconds": round(since_start(), 2),
        }
    ),
    flush=True,
)
