"""Print, per rank, what MPI, Slurm's variables and hpcdist's resolver say (checked by the test)."""

import json
import os
import socket

from mpi4py import MPI

import hpcdist as hd

r = hd.cluster.resolve()
print(
    json.dumps(
        {
            "resolver": type(r).__name__,
            "mpi": [MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size],
            "slurm": [int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_STEP_NUM_TASKS"])],
            "local": [r.local_rank, int(os.environ["SLURM_LOCALID"]), r.local_size],
            "task": [r.task_type, r.task_id, r.is_chief],
            "rank": [r.rank, r.world_size, r.num_nodes],
            "hosts": r.cluster_spec().job_tasks("worker"),
            "gpus": r.num_accelerators(),
            # 6 GPUs a node (none here): the ids each task would bind, from its node's layout
            "bound": hd.cluster.SlurmClusterResolver(gpus_per_node=6, auto_set_gpu=False).task_gpus,
            "node": [socket.gethostname(), int(os.environ["SLURM_NODEID"])],
            "step": [os.environ["SLURM_STEP_NODELIST"], os.environ["SLURM_STEP_TASKS_PER_NODE"]],
        }
    ),
    flush=True,
)
