"""A TF1 cluster that does not fit the ranks: every rank must raise ClusterConfigError.

Usage: ``mpiexec -n N python tf1_bad_cluster.py CASE`` with CASE ``too_few_ranks``,
``same_task``, ``different_specs`` or ``ps_only``; each rank prints the error it got.
"""

import sys

from mpi4py import MPI

import hpcdist.compat.v1 as tf
from hpcdist.errors import ClusterConfigError

case = sys.argv[1]
rank = MPI.COMM_WORLD.rank
spec = {"ps": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]}
job, task = ("ps", 0) if rank == 0 else ("worker", rank - 1)
if case == "same_task":
    job, task = "worker", 0
elif case == "different_specs" and rank == 1:
    spec = {"ps": ["localhost:2222"], "worker": ["otherhost:2223", "localhost:2224"]}
elif case == "ps_only":
    spec = {"ps": [f"localhost:{2222 + i}" for i in range(MPI.COMM_WORLD.size)]}
    job, task = "ps", rank
try:
    tf.train.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=task)
except ClusterConfigError as exc:
    print(f"rank {rank} ClusterConfigError: {exc}", flush=True)
    sys.exit(3)
print(f"rank {rank} no error", flush=True)
