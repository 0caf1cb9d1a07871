"""Construct a ParameterServerStrategy, print the layout on the coordinator, schedule one step.

With argument ``jobs``: the layout comes from ``resolve(jobs={"chief": 1, "ps": 1, "worker":
size - 2})`` instead of ``HPCDIST_NUM_PS``; with ``tfconfig``, from each rank's ``TF_CONFIG``.
"""

import sys

from mpi4py import MPI

import hpcdist as hd

resolver = None
if sys.argv[1:] == ["jobs"]:
    size = MPI.COMM_WORLD.Get_size()
    resolver = hd.cluster.resolve(jobs={"chief": 1, "ps": 1, "worker": size - 2})
elif sys.argv[1:] == ["tfconfig"]:
    resolver = hd.cluster.TFConfigClusterResolver()
strategy = hd.ParameterServerStrategy(resolver)
coordinator = hd.ClusterCoordinator(strategy)
with strategy.scope():
    v = strategy.Variable(1.0)
coordinator.schedule(lambda: v.assign_add(1.0)).fetch()
assert float(v.numpy()) == 2.0
print(f"coordinator ready: {strategy._num_ps} ps, {strategy._num_workers} workers")
