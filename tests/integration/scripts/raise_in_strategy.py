"""Only a strategy (no hd.comm.world()): an exception on the last rank still aborts the job."""

import numpy as np

import hpcdist as hd

strategy = hd.MultiWorkerMirroredStrategy()
if strategy.extended.worker_index == strategy.num_replicas_in_sync - 1:
    raise RuntimeError("boom in a strategy script")
strategy.reduce("sum", np.ones(1), axis=None)
