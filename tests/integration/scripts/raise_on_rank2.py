"""Rank 2 raises while the others wait in a collective: the job must end, not hang."""

import sys
import time

import numpy as np

import hpcdist as hd

comm = hd.comm.world()
if comm.rank == 2:
    time.sleep(0.5)
    raise RuntimeError("boom on rank 2")
comm.allreduce(np.ones(4))  # the others wait here forever without the abort hook
print("unreachable", file=sys.stderr)
