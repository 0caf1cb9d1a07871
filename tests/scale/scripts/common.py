"""What every scale script shares: process start time, memory per rank, one report line.

Each script prints, on rank 0, one line ``SCALE {json}`` that `tests/scale` reads: the case's
results plus the memory of every rank (max resident set, MiB) and the start-up time.
"""

from __future__ import annotations

import json
import os
import resource
import time
from typing import Any


def process_start() -> float:
    """Wall-clock time (epoch seconds) at which this process started, from /proc."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def max_rss_mib() -> float:
    """This process's peak resident set so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def since_start() -> float:
    """Seconds since this process started."""
    return time.time() - process_start()


def report(comm: Any, case: str, **results: Any) -> None:
    """Gather every rank's memory on rank 0 and print the case's ``SCALE`` line there.

    Collective over ``comm`` (an hpcdist communicator).
    """
    mine = {"rss_mib": max_rss_mib(), "seconds": since_start()}
    every = comm.allgather_object(mine)
    if comm.rank == 0:
        rss = sorted(e["rss_mib"] for e in every)
        line = {
            "case": case,
            "ranks": comm.size,
            "rss_mib_max": round(rss[-1], 1),
            "rss_mib_median": round(rss[len(rss) // 2], 1),
            "rss_mib_total": round(sum(rss), 1),
            "seconds_max": round(max(e["seconds"] for e in every), 2),
            **results,
        }
        print("SCALE " + json.dumps(line), flush=True)
