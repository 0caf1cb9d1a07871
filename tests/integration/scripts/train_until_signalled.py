"""Trains a linear model on every rank until a signal ends the job. argv: READY_DIR [MODE].

Each step averages the ranks' gradients with an all-reduce and sleeps a little; after the first
step each rank writes READY_DIR/ready.RANK. MODE ``stubborn`` ignores SIGTERM, SIGINT and
SIGHUP, so that only a kill ends the job.
"""

import signal
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

ready_dir = Path(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2] == "stubborn":
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

comm = MPI.COMM_WORLD
rng = np.random.default_rng(comm.rank)
x = rng.normal(size=(64, 4))
y = x @ np.array([1.0, -2.0, 0.5, 3.0])
w = np.zeros(4)
for step in range(100_000):
    grad = 2 * x.T @ (x @ w - y) / len(x)
    total = np.empty_like(grad)
    comm.Allreduce(grad, total)
    w -= 0.05 * total / comm.size
    if step == 0:
        (ready_dir / f"ready.{comm.rank}").write_text(str(step))
    time.sleep(0.02)
