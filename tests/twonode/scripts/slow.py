"""One all-reduce that waits: argv[1] ``late`` (the last rank arrives argv[3] s late) or ``slow``
(every rank arrives; argv[2] MiB must cross the rate-limited link). Prints the result or the
error on each rank; the stall warning goes to the log (stderr)."""

import sys
import time

import numpy as np

import hpcdist as hd

mode, mib = sys.argv[1], float(sys.argv[2])
late = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
comm = hd.comm.world()
x = np.full(int(mib * (1 << 20)) // 4, comm.rank + 1, dtype=np.float32)
comm.barrier()
if mode == "late" and comm.rank == comm.size - 1:
    time.sleep(late)
start = time.monotonic()
try:
    out = comm.allreduce(x)
    expected = comm.size * (comm.size + 1) / 2
    ok = bool((out == expected).all())
    print(f"rank {comm.rank} ok={ok} in {time.monotonic() - start:.1f} s", flush=True)
except hd.errors.DeadlineExceededError as exc:
    print(f"rank {comm.rank} DeadlineExceededError: {exc}", flush=True)
    raise
