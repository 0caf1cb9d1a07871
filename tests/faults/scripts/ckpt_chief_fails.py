"""A save whose chief cannot write its file: every rank must raise, none may wait in a barrier.

argv: DIRECTORY OUT. A directory already sits where the chief renames ``ckpt-2.h5``, so only
the chief's write fails; the other ranks would wait for it. Each rank writes its lines to
``OUT/rank<r>.txt``.
"""

import os
import sys

import numpy as np

import hpcdist as hd
from hpcdist.checkpoint import CheckpointError, CheckpointOptions, checkpoint_communicator

directory, out = sys.argv[1], sys.argv[2]
comm = checkpoint_communicator()
rank = comm.rank
os.makedirs(out, exist_ok=True)
report = open(os.path.join(out, f"rank{rank}.txt"), "w")  # noqa: SIM115
v = hd.get_strategy().Variable(np.arange(4.0))
manager = hd.CheckpointManager(hd.Checkpoint(v=v), directory, max_to_keep=2)
manager.save()  # ckpt-1.h5
if rank == 0:
    os.makedirs(os.path.join(directory, "ckpt-2.h5"))
comm.barrier()
try:
    manager.save()
except CheckpointError as exc:
    print(f"rank {rank}: sync: {type(exc).__name__}: {exc}", file=report, flush=True)
else:
    print(f"rank {rank}: sync: no error", file=report, flush=True)
print(f"rank {rank}: latest {os.path.basename(manager.latest_checkpoint)}", file=report, flush=True)

# Asynchronous: the chief's background write fails; the next save raises it on every rank.
async_options = CheckpointOptions(experimental_enable_async_checkpoint=True)
if rank == 0:
    os.makedirs(os.path.join(directory, "ckpt-4.h5"))
comm.barrier()
manager.save(checkpoint_number=4, options=async_options)
try:
    manager.save(checkpoint_number=5)
except CheckpointError as exc:
    print(f"rank {rank}: async: {type(exc).__name__}: {exc}", file=report, flush=True)
else:
    print(f"rank {rank}: async: no error", file=report, flush=True)
manager.save(checkpoint_number=6)  # the ranks are still in step
print(f"rank {rank}: latest {os.path.basename(manager.latest_checkpoint)}", file=report, flush=True)
