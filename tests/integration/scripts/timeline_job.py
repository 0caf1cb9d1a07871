"""A job recorded with HPCDIST_TIMELINE: collectives, steps, one rank late on purpose.

argv: LATE_RANK SLEEP_S [CHECKPOINT_DIR]. Every rank runs 20 rounds of an all-reduce, a grouped
all-reduce and a broadcast, and a ``strategy.run`` step; LATE_RANK sleeps SLEEP_S before each
round. Then 10 steps over a distributed dataset whose pipeline sleeps SLEEP_S per batch on
LATE_RANK only (its input waits). With CHECKPOINT_DIR, a checkpoint is saved there and restored
at the end.
"""

import sys
import time

import numpy as np

import hpcdist as hd

late_rank, sleep_s = int(sys.argv[1]), float(sys.argv[2])
comm = hd.comm.world()
strategy = hd.MultiWorkerMirroredStrategy()
for _ in range(20):
    if comm.rank == late_rank:
        time.sleep(sleep_s)
    comm.allreduce(np.ones(1 << 16, np.float32))
    comm.grouped_allreduce([np.ones(100, np.float64), np.ones(7, np.float64)])
    comm.broadcast(np.arange(10, dtype=np.int64), root=0)
    strategy.run(lambda: None)


def slow_on_late_rank(batch):
    if comm.rank == late_rank:
        time.sleep(sleep_s)
    return batch


dataset = hd.data.Dataset.from_tensor_slices(np.arange(20 * comm.size, dtype=np.float32))
dataset = dataset.batch(2 * comm.size).map(slow_on_late_rank)
for batch in strategy.experimental_distribute_dataset(dataset):
    strategy.run(lambda b: b * 2, args=(batch,))
if len(sys.argv) > 3:
    with strategy.scope():
        v = strategy.Variable(np.arange(4, dtype=np.float32))
    ckpt = hd.Checkpoint(v=v)
    path = ckpt.save(sys.argv[3] + "/ckpt")
    ckpt.restore(path)
print(f"rank {comm.rank} done", flush=True)
