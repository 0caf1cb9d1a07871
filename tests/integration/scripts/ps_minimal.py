"""Construct a ParameterServerStrategy, print the layout on the coordinator, schedule one step.

With argument ``jobs``: the layout comes from ``resolve(jobs={"chief": 1, "ps": 1, "worker":
size - 2})`` instead of ``HPCDIST_NUM_PS``; with ``tfconfig``, from each rank's ``TF_CONFIG``.
With ``queued LOG``, the program ends with 200 functions queued, each appending a line to LOG.
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
spec = strategy.cluster_resolver.cluster_spec()
print(
    f"coordinator ready: {spec.num_tasks('ps')} ps, {spec.num_tasks('worker')} workers",
    flush=True,
)
if sys.argv[1:2] == ["queued"]:  # end the program with work queued: cancelled, not waited for
    import time

    log = sys.argv[2]

    def work():
        time.sleep(0.05)
        with open(log, "a") as f:
            f.write("ran\n")

    for _ in range(200):
        coordinator.schedule(work)
    print("leaving with functions queued", flush=True)
