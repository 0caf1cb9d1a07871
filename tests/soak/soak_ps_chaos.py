"""Soak: fault-tolerant parameter-server training while random workers are SIGKILLed.

Run: ``hpcdist run --ps 2 --workers 4 --worker-restarts 1000 tests/soak/soak_ps_chaos.py
[--functions 10000] [--seconds 60] [--every 3]`` (``make soak``). The coordinator schedules
``--functions`` functions; each increments a counter on ps 0, adds ones to a vector on ps 1 and
returns its own number. A thread of the coordinator SIGKILLs a random worker process of this
launch every ``--every`` seconds for ``--seconds`` (or until the functions are done); the
launcher restarts each. Checks, printed as JSON with ``"ok"``:

* every `RemoteValue` resolves to its own function's number (each exactly once: its value);
* at-least-once: ``functions <= counter <= functions + kills`` (a function runs alone on a
  worker, never batched, so a death reruns at most the one it was running);
* no ps memory torn: every element of the vector equals every other, and differs from the
  counter by at most the number of kills (a kill between the two updates);
* the program then ends by itself (the launcher's exit code is 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np

import hpcdist as hd
from hpcdist.strategies.ps.runtime import coordinator_runtime

VECTOR = 1024


def worker_processes(launch_dir: str) -> list[int]:
    """Pids of this launch's worker ranks (python processes whose launch file is a worker's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cmdline or b"python" not in Path(cmdline[0].decode()).name.encode():
            continue
        marker = f"HPCDIST_PS_LAUNCH={launch_dir}/worker-".encode()
        if any(item.startswith(marker) for item in environ):
            pids.append(int(entry.name))
    return pids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--functions", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=3.0)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    args = parser.parse_args()
    strategy = hd.ParameterServerStrategy()
    coordinator = hd.ClusterCoordinator(strategy)
    rt = coordinator_runtime()
    with strategy.scope():
        counter = hd.Variable(np.int64(0))  # ps 0
        vector = hd.Variable(np.zeros(VECTOR, np.int64))  # ps 1
    ones = np.ones(VECTOR, np.int64)
    step = args.step_seconds

    def work(i):
        time.sleep(step)
        counter.assign_add(np.int64(1))
        vector.assign_add(ones)
        return i

    launch_dir = str(Path(os.environ["HPCDIST_PS_LAUNCH"]).parent)
    kills: list[float] = []
    done = threading.Event()
    rng = random.Random(0)
    start = time.monotonic()

    def killer() -> None:
        while not done.wait(args.every) and time.monotonic() - start < args.seconds:
            pids = worker_processes(launch_dir)
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills.append(time.monotonic() - start)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    rvs = [coordinator.schedule(work, args=(i,)) for i in range(args.functions)]
    coordinator.join()
    took = time.monotonic() - start
    done.set()
    thread.join()
    values = [rv.fetch() for rv in rvs]
    wrong = sum(1 for i, v in enumerate(values) if v != i)
    count = int(counter.read_value())
    vec = vector.read_value()
    n, k = args.functions, len(kills)
    torn = int(vec.min() != vec.max())
    result = {
        "functions": n,
        "seconds": round(took, 1),
        "kills": k,
        "deaths_seen": rt.deaths,
        "joins": rt.joins,
        "wrong_values": wrong,
        "counter": count,
        "reran": count - n,
        "vector_min": int(vec.min()),
        "vector_max": int(vec.max()),
        "torn": torn,
    }
    result["ok"] = bool(
        wrong == 0 and n <= count <= n + k and not torn and abs(int(vec[0]) - count) <= k
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
