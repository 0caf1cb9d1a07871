"""The last rank stops itself (SIGSTOP) before a collective; the others must get a deadline.

argv[1]: the implementation of the all-reduce. Every rank prints its pid (the test continues
and kills the stopped one); the others print their `DeadlineExceededError` and re-raise it (the
abort hook ends the job).
"""

import os
import signal
import sys
import time

import numpy as np

import hpcdist as hd

comm = hd.comm.world()
comm.allreduce(np.ones(4))
print(f"rank {comm.rank} pid {os.getpid()}", flush=True)
comm.barrier()
if comm.rank == comm.size - 1:
    os.kill(os.getpid(), signal.SIGSTOP)
try:
    comm.allreduce(np.ones(8), options=hd.CommunicationOptions(implementation=sys.argv[1]))
except hd.errors.DeadlineExceededError as exc:
    print(f"rank {comm.rank} DeadlineExceededError missing={list(exc.missing_ranks)}: {exc}")
    sys.stdout.flush()
    time.sleep(3)  # let the other waiting ranks reach their own deadline before aborting
    raise
