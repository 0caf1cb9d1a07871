"""Small scheduled functions: round-trip latency, throughput, and the CPU idle ranks burn.

Run: ``python benchmarks/ps_closures.py [--launch single|ft|both] [--out results.json]``. On
one process it is the driver: ``single`` launches ``HPCDIST_NUM_PS=1 mpiexec -n 3``
(coordinator, 1 ps, 1 worker) and ``-n 4`` (2 workers); ``ft`` the fault-tolerant launch
``hpcdist run --ps 1 --workers 1`` and ``--workers 2`` (each worker its own MPI job, joined
through a port); ``both`` (the default) runs all and adds ``ft_over_single``, the ratios of
the fault-tolerant mode's round trip and functions/s to the single job's. Inside a job:

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


def launch_workers(launch_dir: str) -> list[int]:
    """Pids of the worker ranks of the fault-tolerant launch in ``launch_dir`` (from /proc)."""
    marker = f"HPCDIST_PS_LAUNCH={launch_dir}/worker-".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0")[0])
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if b"python" in program and any(item.startswith(marker) for item in environ):
            pids.append(int(entry))
    return pids


def chaos(out: str | None, seconds: float, every: float) -> None:
    """Functions/s over time, a random worker SIGKILLed every ``every`` s (fault-tolerant)."""
    import random
    import signal
    import threading

    strategy = hd.ParameterServerStrategy()
    coordinator = hd.ClusterCoordinator(strategy)
    launch_dir = os.path.dirname(os.environ["HPCDIST_PS_LAUNCH"])
    for _ in range(200):
        coordinator.schedule(noop).fetch()
    rng, kills, stop = random.Random(0), [], threading.Event()
    start = time.perf_counter()

    def killer() -> None:
        while not stop.wait(every - (time.perf_counter() - start) % every):
            pids = launch_workers(launch_dir)
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills.append(time.perf_counter() - start)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    done = np.zeros(int(seconds) + 1)
    while (now := time.perf_counter() - start) < seconds:
        rvs = [coordinator.schedule(noop) for _ in range(100)]
        coordinator.join()
        done[int(time.perf_counter() - start)] += len(rvs)
        del now, rvs
    stop.set()
    thread.join()
    emit(
        {
            "benchmark": "ps_closures_chaos",
            "workers": strategy.cluster_resolver.cluster_spec().num_tasks("worker"),
            "kill_every_s": every,
            "kills_at_s": [round(k, 2) for k in kills],
            "functions_per_s": done[: int(seconds)].tolist(),
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


def _run(cmd: list[str], env: dict[str, str], path: str) -> dict:
    subprocess.run(
        [*cmd, "--out", path], check=True, env=env, timeout=600, stdout=subprocess.DEVNULL
    )
    with open(path) as f:
        return json.load(f)


def driver(out: str | None, launch: str) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HPCDIST_"))}
    me = [sys.executable, os.path.abspath(__file__), "--job"]
    ft = [sys.executable, "-m", "hpcdist", "run", "--ps", "1", "--workers"]
    result: dict = {"benchmark": "ps_closures", "machine_cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        if launch in ("single", "both"):
            single = dict(env, HPCDIST_NUM_PS="1")
            for name, ranks, extra in (
                ("raw", 2, ["--raw"]),
                ("one_worker", 3, []),
                ("two_workers", 4, []),
            ):
                cmd = [mpiexec, "-n", str(ranks), *me, *extra]
                result[name] = _run(cmd, single, os.path.join(tmp, f"{name}.json"))
            result["roundtrip_over_raw"] = (
                result["one_worker"]["roundtrip_us"] / result["raw"]["raw_roundtrip_us"]
            )
        if launch in ("ft", "both"):  # hpcdist run --ps 1 --workers W: one job per worker
            for name, workers in (("ft_one_worker", 1), ("ft_two_workers", 2)):
                cmd = [*ft, str(workers), *me]
                result[name] = _run(cmd, env, os.path.join(tmp, f"{name}.json"))
        if launch == "both":
            one, two = result["ft_one_worker"], result["ft_two_workers"]
            result["ft_over_single"] = {
                "roundtrip_us": one["roundtrip_us"] / result["one_worker"]["roundtrip_us"],
                "functions_per_s_one_worker": one["functions_per_s"]
                / result["one_worker"]["functions_per_s"],
                "functions_per_s_two_workers": two["functions_per_s"]
                / result["two_workers"]["functions_per_s"],
            }
    emit(result, out)


def plot_chaos(result: dict, path: str) -> None:
    """Draw functions/s over time with the kills marked (matplotlib) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = result["functions_per_s"]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.step(range(len(rates)), rates, where="post", label="no-op functions completed per second")
    for i, k in enumerate(result["kills_at_s"]):
        ax.axvline(k, color="red", linestyle="--", label="worker SIGKILLed" if i == 0 else None)
    ax.set_xlabel("seconds")
    ax.set_ylabel("functions/s")
    ax.set_ylim(bottom=0)
    ax.set_title("hpcdist run --ps 1 --workers 2: a random worker killed every 10 s")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def chaos_driver(out: str | None, seconds: float, every: float, plot: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HPCDIST_"))}
    cmd = [sys.executable, "-m", "hpcdist", "run", "--ps", "1", "--workers", "2"]
    cmd += ["--worker-restarts", "1000", os.path.abspath(__file__), "--job"]
    cmd += ["--chaos", str(seconds), "--every", str(every)]
    with tempfile.TemporaryDirectory() as tmp:
        result = _run(cmd, env, os.path.join(tmp, "chaos.json"))
    rates = result["functions_per_s"]
    print("second  functions/s  (a '*' marks a kill)", file=sys.stderr)
    top = max(max(rates), 1.0)
    for t, rate in enumerate(rates):
        mark = "*" if any(t <= k < t + 1 for k in result["kills_at_s"]) else " "
        bar = "#" * int(rate / top * 50)
        print(f"{t:6d} {mark} {rate:10.0f}  {bar}", file=sys.stderr)
    if plot:
        plot_chaos(result, plot)
    emit(result, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--launch",
        choices=("single", "ft", "both"),
        default="both",
        help="single MPI job (mpiexec -n N), the fault-tolerant launch (hpcdist run --ps 1 "
        "--workers W), or both side by side (default)",
    )
    parser.add_argument(
        "--chaos",
        type=float,
        default=None,
        help="instead: functions/s over this many seconds of the fault-tolerant launch (1 ps, "
        "2 workers) with a random worker SIGKILLed every --every seconds",
    )
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--plot", default=None, help="with --chaos: draw the PNG here")
    args = parser.parse_args()
    if args.chaos is not None and args.job:
        chaos(args.out, args.chaos, args.every)
    elif args.chaos is not None:
        chaos_driver(args.out, args.chaos, args.every, args.plot)
    elif not args.job:
        driver(args.out, args.launch)
    elif args.raw:
        raw_roundtrip(args.out)
    else:
        job(args.out)


if __name__ == "__main__":
    main()
