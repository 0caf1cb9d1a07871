"""Small scheduled functions: round-trip latency, throughput, and the CPU idle ranks burn.

Run: ``python benchmarks/ps_closures.py [--out results.json]``. On one process it is the
driver: it launches ``HPCDIST_NUM_PS=1 mpiexec -n 3`` (coordinator, 1 ps, 1 worker) and
``-n 4`` (2 workers) and combines their JSON. Inside a job:

- ``roundtrip_us``: ``coordinator.schedule(noop).fetch()`` in a loop, the median over rounds of
  the mean per call (``roundtrip_call_p50_us``/``p90``: percentiles of single calls, which a
  few descheduled calls on a busy machine do not move), against the raw baseline: an mpi4py
  ``send``/``recv`` of the same tiny pickles between the coordinator and the worker, which are
  idle otherwise (the floor of any design);
- ``functions_per_s``: 20,000 no-op functions scheduled back to back, then ``join``;
- ``idle_cpu``: CPU seconds per wall second used by every rank during 2 s with nothing
  scheduled (from ``/proc``; 1.0 = a whole core).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit  # noqa: E402

import hpcdist as hd  # noqa: E402

ROUNDS = 5
CALLS = 400
MANY = 20_000


def noop() -> int:
    """The scheduled function: nothing."""
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (from /proc; same machine)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pids: list[int], seconds: float) -> list[float]:
    """CPU seconds per wall second of each process over ``seconds`` of idleness."""
    t0, c0 = time.perf_counter(), [cpu_seconds(p) for p in pids]
    time.sleep(seconds)
    t1, c1 = time.perf_counter(), [cpu_seconds(p) for p in pids]
    return [(b - a) / (t1 - t0) for a, b in zip(c0, c1, strict=True)]


def job(out: str | None) -> None:
    pids = MPI.COMM_WORLD.gather(os.getpid(), root=0)  # before ps/workers start serving
    strategy = hd.ParameterServerStrategy()
    coordinator = hd.ClusterCoordinator(strategy)
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    for _ in range(200):  # warm up: the function cached on the workers
        coordinator.schedule(noop).fetch()
    rounds, calls = [], []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            t1 = time.perf_counter()
            coordinator.schedule(noop).fetch()
            calls.append(time.perf_counter() - t1)
        rounds.append((time.perf_counter() - t0) / CALLS)
    t0 = time.perf_counter()
    for _ in range(MANY):
        coordinator.schedule(noop)
    coordinator.join()
    rate = MANY / (time.perf_counter() - t0)
    time.sleep(0.5)  # then nothing scheduled: how much CPU does each rank burn?
    idle = idle_cpu(pids, 2.0)
    emit(
        {
            "benchmark": "ps_closures",
            "workers": workers,
            "roundtrip_us": float(np.median(rounds)) * 1e6,
            "roundtrip_rounds_us": [r * 1e6 for r in rounds],
            # per call: on a shared machine the mean above is ruled by a few descheduled calls
            "roundtrip_call_p50_us": float(np.percentile(calls, 50)) * 1e6,
            "roundtrip_call_p90_us": float(np.percentile(calls, 90)) * 1e6,
            "functions_per_s": rate,
            "idle_cpu_per_rank": idle,  # rank 0 coordinator, 1 ps, then workers
        },
        out,
    )


def raw_roundtrip(out: str | None) -> None:
    """The floor: mpi4py pickled send/recv between rank 0 and rank 1 (others idle in recv)."""
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    message = ("run", 7, None, b"\x80\x05\x95\x07\x00\x00\x00\x00\x00\x00\x00)}\x94\x86\x94.", ())
    reply = b"\x80\x05\x95\x0e\x00\x00\x00\x00\x00\x00\x00\x8c\x02ok\x94K\x00N\x87\x94."
    rounds = []
    for r in range(ROUNDS + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            if rank == 0:
                comm.send(message, dest=1, tag=71)
                comm.recv(source=1, tag=72)
            elif rank == 1:
                comm.recv(source=0, tag=71)
                comm.send(reply, dest=0, tag=72)
        if r:
            rounds.append((time.perf_counter() - t0) / CALLS)
    if rank == 0:
        emit({"raw_roundtrip_us": float(np.median(rounds)) * 1e6}, out)


def driver(out: str | None) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HPCDIST_"))}
    env["HPCDIST_NUM_PS"] = "1"
    result: dict = {"benchmark": "ps_closures", "machine_cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, ranks, extra in (
            ("raw", 2, ["--raw"]),
            ("one_worker", 3, []),
            ("two_workers", 4, []),
        ):
            path = os.path.join(tmp, f"{name}.json")
            cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__)]
            subprocess.run(
                [*cmd, "--job", *extra, "--out", path],
                check=True,
                env=env,
                timeout=600,
                stdout=subprocess.DEVNULL,
            )
            with open(path) as f:
                result[name] = json.load(f)
    result["roundtrip_over_raw"] = (
        result["one_worker"]["roundtrip_us"] / result["raw"]["raw_roundtrip_us"]
    )
    emit(result, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.job:
        driver(args.out)
    elif args.raw:
        raw_roundtrip(args.out)
    else:
        job(args.out)


if __name__ == "__main__":
    main()
