"""Shared helpers of the benchmarks: timing with medians, JSON output."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI


def time_collective(
    fn: Callable[[], Any], comm: MPI.Comm, min_reps: int = 5, budget_s: float = 0.5
) -> float:
    """Median seconds of ``fn`` over synchronised repetitions (same count on every rank)."""
    fn()
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    one = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    reps = int(max(min_reps, min(2000, budget_s / max(one, 1e-7))))
    times = np.empty(reps)
    for i in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t0
    worst = np.empty_like(times)
    comm.Allreduce(times, worst, op=MPI.MAX)
    return float(np.median(worst))


def memcpy_bandwidth(nbytes: int) -> float:
    """Numpy copy bandwidth in GB/s, read and write counted."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t0)
    return 2 * nbytes / float(np.median(times)) / 1e9


def emit(result: dict[str, Any], path: str | None) -> None:
    """Print the result as JSON and write it to ``path`` (rank 0 only)."""
    if MPI.COMM_WORLD.Get_rank() != 0:
        return
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    sys.stdout.flush()


def median_time(fn: Callable[[], Any], reps: int) -> float:
    """Median seconds of ``reps`` calls of ``fn`` (one process, no synchronisation)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
