"""Parameter server: memory kept for scheduled functions after many distinct closures.

Run: ``python benchmarks/ps_function_cache.py [--closures N] [--kib K] [--workers W]`` (default
1,000 closures of 160 KiB on 2 workers, well under a minute; ``--full`` is the issue's 5,000 x
160 KiB). On one process it is the driver: it launches ``mpiexec -n W+2`` (a coordinator, one ps,
W workers, ``HPCDIST_NUM_PS=1``) on itself with ``--job`` and prints the job's JSON.

Inside the job the coordinator schedules N distinct closures, each capturing K KiB of random
bytes, and drops each one after scheduling it (the usual ``schedule(lambda: ...)`` pattern),
joining every 100. It reports the growth of the resident set size (``VmRSS``, after
``gc.collect()``) of the coordinator and of every worker between a warmed-up start and the end.
A cache that keeps every function and its pickle for the job's life grows by about N x K on the
coordinator and by the share of N x K each worker ran; a bounded one stays flat.

Only the public API is used, so the script measures any tree: run it with that tree's Python
from that tree's directory.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BATCH = 100


def rss_mb() -> float:
    """This process's resident set size in MiB (after a garbage collection)."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


def _probe() -> tuple[int, float]:
    """A scheduled function: ``(rank, RSS in MiB)`` of the worker that runs it."""
    from mpi4py import MPI  # on the worker: pickled by value

    time.sleep(0.05)  # long enough that every idle worker gets one of a batch
    return MPI.COMM_WORLD.Get_rank(), rss_mb()


def _workers_rss(coordinator: Any, workers: int) -> dict[int, float]:
    seen: dict[int, float] = {}
    for _ in range(50):
        values = [coordinator.schedule(_probe) for _ in range(2 * workers)]
        for value in values:
            rank, rss = value.fetch()
            seen[rank] = rss
        if len(seen) == workers:
            break
    return seen


def _closure(nbytes: int) -> Any:
    data = os.urandom(nbytes)

    def step() -> int:
        return len(data)

    return step


def job(closures: int, kib: int) -> None:
    """The measurement, inside ``mpiexec``: prints one JSON line on the coordinator."""
    import hpcdist as hd  # the driver must not start MPI

    strategy = hd.ParameterServerStrategy()
    coordinator = hd.ClusterCoordinator(strategy)
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    for _ in range(2 * BATCH):  # warm up: imports, allocator arenas, the dispatcher
        coordinator.schedule(_closure(kib << 10))
    coordinator.join()
    coordinator_before = rss_mb()
    workers_before = _workers_rss(coordinator, workers)
    start = time.perf_counter()
    for i in range(closures):
        coordinator.schedule(_closure(kib << 10))
        if (i + 1) % BATCH == 0:
            coordinator.join()
    coordinator.join()
    seconds = time.perf_counter() - start
    coordinator_after = rss_mb()
    workers_after = _workers_rss(coordinator, workers)
    result = {
        "closures": closures,
        "closure_kib": kib,
        "workers": workers,
        "schedule_seconds": round(seconds, 2),
        "coordinator_rss_growth_mib": round(coordinator_after - coordinator_before, 1),
        "worker_rss_growth_mib": {
            str(rank): round(workers_after[rank] - workers_before[rank], 1)
            for rank in sorted(workers_after)
            if rank in workers_before
        },
    }
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    """Parse arguments; run the job (``--job``) or launch it and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--closures", type=int, default=1000)
    parser.add_argument("--kib", type=int, default=160, help="bytes captured by each closure")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="5,000 closures of 160 KiB")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.full:
        args.closures, args.kib = 5000, 160
    if args.job:
        job(args.closures, args.kib)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCDIST_", "SLURM_"))}
    env.update(HPCDIST_NUM_PS="1", OMP_NUM_THREADS="1")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    command = [
        str(mpiexec) if mpiexec.exists() else "mpiexec",
        "-n",
        str(args.workers + 2),
        sys.executable,
        os.path.abspath(__file__),
        "--job",
        "--closures",
        str(args.closures),
        "--kib",
        str(args.kib),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            result["python"] = sys.executable
            print(json.dumps(result, indent=1))
            return
    sys.exit(f"the job printed no result (exit {done.returncode}):\n{done.stderr[-3000:]}")


if __name__ == "__main__":
    main()
