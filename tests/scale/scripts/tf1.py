"""The TF1 trainer (examples/tf1_trainer.py) with P ps tasks and the rest workers. argv: P DIR.

Runs the example unchanged (SPMD: ps ranks first), to ``--last_step 300`` with its checkpoint
directory in DIR; every rank prints its peak resident memory at exit (``RSS rank R MiB``), which
the test reads beside the workers' ``worker I runs ... global_step G`` lines.
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path

from common import max_rss_mib
from mpi4py import MPI

ps, directory = int(sys.argv[1]), sys.argv[2]
size, rank = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
atexit.register(lambda: print(f"RSS rank {rank} {max_rss_mib():.1f} MiB", flush=True))
example = Path(__file__).resolve().parents[3] / "examples" / "tf1_trainer.py"
sys.argv = [
    str(example),
    "--ps_hosts=" + ",".join(f"ps{i}:2222" for i in range(ps)),
    "--worker_hosts=" + ",".join(f"worker{i}:2222" for i in range(size - ps)),
    f"--checkpoint_dir={directory}/train_logs",
    "--last_step=300",
]
runpy.run_path(str(example), run_name="__main__")
