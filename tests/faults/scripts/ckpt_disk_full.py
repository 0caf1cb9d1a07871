"""A save that fills the disk: every rank raises an OSError naming the file and errno 28.

argv: DIRECTORY (a small tmpfs). The first checkpoint fits; then a filler file leaves too little
room for the second. The first checkpoint must stay listed and loadable, with no temporary
file left behind. Each rank writes its lines to
``OUT/rank<r>.txt``.
"""

import errno
import os
import sys

import numpy as np

import hpcdist as hd
from hpcdist.checkpoint import CheckpointError, checkpoint_communicator

directory, out = sys.argv[1], sys.argv[2]
comm = checkpoint_communicator()
rank = comm.rank
os.makedirs(out, exist_ok=True)
report = open(os.path.join(out, f"rank{rank}.txt"), "w")  # noqa: SIM115
v = hd.get_strategy().Variable(np.full((64, 1024), 1.0))  # 512 KiB
manager = hd.CheckpointManager(hd.Checkpoint(v=v), directory, max_to_keep=1)
first = manager.save()
if rank == 0:
    stat = os.statvfs(directory)
    with open(os.path.join(directory, "filler"), "wb") as f:
        f.write(b"\0" * max(stat.f_bavail * stat.f_frsize - 64 * 1024, 0))
comm.barrier()
v.assign(np.full((64, 1024), 2.0))
try:
    manager.save()
except CheckpointError as exc:
    full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    print(f"rank {rank}: {type(exc).__name__} enospc={full}: {exc}", file=report, flush=True)
else:
    print(f"rank {rank}: no error", file=report, flush=True)
comm.barrier()
left = sorted(f for f in os.listdir(directory) if f != "filler")
w = hd.get_strategy().Variable(np.zeros((64, 1024)))
again = hd.CheckpointManager(hd.Checkpoint(v=w), directory, max_to_keep=1)
restored = again.restore_or_initialize()
ok = restored == first and bool((w.numpy() == 1.0).all())
print(
    f"rank {rank}: files {left}; restored {os.path.basename(restored)} ok={ok}",
    file=report,
    flush=True,
)
