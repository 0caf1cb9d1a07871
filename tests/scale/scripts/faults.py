"""Mismatch and stall checks name the right rank among many. argv: MISMATCH_RANK STALL_RANK.

1. Rank MISMATCH_RANK all-reduces a (5,) array, every other rank a (4,) one: every rank raises
   `CollectiveMismatchError` whose message names MISMATCH_RANK as the one that sent float32[5].
2. A checked all-reduce still works after the mismatch (the communicator stays usable).
3. Rank STALL_RANK does not join an all-reduce with a 10 s deadline: every other rank raises
   `DeadlineExceededError` whose ``missing_ranks`` is exactly (STALL_RANK,) and whose message
   names it. Each rank's outcome is gathered over raw ``COMM_WORLD`` (hpcdist's communicator
   is unusable after a deadline, by design) and rank 0 prints the report.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from common import max_rss_mib, since_start
from mpi4py import MPI

import hpcdist as hd

bad, stalled = int(sys.argv[1]), int(sys.argv[2])
comm = hd.comm.world()
rank = comm.rank
outcome = {"rank": rank}
try:
    comm.allreduce(np.ones(5 if rank == bad else 4, np.float32))
    outcome["mismatch"] = "no error"
except hd.errors.CollectiveMismatchError as exc:
    text = str(exc)
    outcome["mismatch"] = "named" if f"rank {bad} sent allreduce" in text else text
assert comm.allreduce(np.ones(2))[0] == comm.size  # still usable
limit = hd.CommunicationOptions(timeout_seconds=10)
if rank == stalled:
    time.sleep(14)  # past the others' deadline; never joins
    outcome["stall"] = "stalled"
else:
    try:
        comm.allreduce(np.ones(8), options=limit)
        outcome["stall"] = "no error"
    except hd.errors.DeadlineExceededError as exc:
        named = exc.missing_ranks == (stalled,) and f"{stalled}" in str(exc)
        outcome["stall"] = "named" if named else f"missing={exc.missing_ranks}: {exc}"
outcome["rss_mib"] = max_rss_mib()
every = MPI.COMM_WORLD.gather(outcome, root=0)
if rank == 0:
    want = {r: "stalled" if r == stalled else "named" for r in range(len(every))}
    wrong = [e for e in every if e["mismatch"] != "named" or e["stall"] != want[e["rank"]]]
    rss = sorted(e["rss_mib"] for e in every)

    print(
        "SCALE "
        + json.dumps(
            {
                "case": "faults",
                "ranks": len(every),
                "mismatch_rank": bad,
                "stall_rank": stalled,
                "wrong": wrong[:5],
                "wrong_count": len(wrong),
                "rss_mib_max": round(rss[-1], 1),
                "rss_mib_median": round(rss[len(rss) // 2], 1),
                "seconds": round(since_start(), 2),
            }
        ),
        flush=True,
    )
