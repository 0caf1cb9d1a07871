"""Cost of recording a timeline at a 1 ms training step, and a picture of a two-rank trace.

Run: ``mpiexec -n 2 python benchmarks/timeline.py [--out results.json] [--plot trace.png]``.
Each step is about 1 ms of numpy work (one BLAS thread per rank) inside ``strategy.run``, then
an all-reduce of 256 KiB of gradients and a grouped all-reduce of 20 small tensors. Rounds of
200 steps alternate between recording off and on (`hpcdist.timeline.start` / ``stop``);
reported: median step time of each and the relative cost. With ``--plot``, the last recorded
round is drawn (one row per rank, a bar per event, coloured by kind) from the trace file.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit  # noqa: E402

import hpcdist as hd  # noqa: E402
from hpcdist import timeline  # noqa: E402

STEPS, ROUNDS = 200, 6


def calibrated_work(target_s: float):
    """A function doing about ``target_s`` seconds of small matrix products."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)) / 8, rng.standard_normal((64, 64)) / 8

    def work(iters: int) -> float:
        x = a
        for _ in range(iters):
            x = np.tanh(x @ b)
        return float(x.sum())

    t0 = time.perf_counter()
    work(200)
    per = (time.perf_counter() - t0) / 200
    iters = max(1, int(target_s / per))
    return lambda: work(iters)


def plot(trace_path: str, png: str) -> None:
    """Draw the trace: a row per rank, one bar per event, coloured by category/name."""
    import matplotlib  # only for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    end = max(e["ts"] + e["dur"] for e in events)
    window = [e for e in events if e["ts"] > end - 12_000]  # the last 12 ms
    t0 = min(e["ts"] for e in window)
    colours = {"step": "#4c72b0", "allreduce": "#dd8452", "grouped_allreduce": "#55a868"}
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for e in window:
        key = "step" if e["cat"] == "step" else e["name"]
        lane = e["pid"] + (0.22 if e["cat"] == "step" else -0.22)
        ax.barh(lane, e["dur"] / 1e3, left=(e["ts"] - t0) / 1e3, height=0.36,
                color=colours.get(key, "#8172b2"))  # fmt: skip
    ax.set_yticks(sorted({e["pid"] for e in window}))
    ax.set_yticklabels([f"rank {p}" for p in sorted({e["pid"] for e in window})])
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, ["strategy.run", "allreduce", "grouped_allreduce"], loc="upper right",
              fontsize=8)  # fmt: skip
    ax.set_title("hpcdist timeline: two ranks, 1 ms steps (from the trace file)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    comm = hd.comm.world()
    strategy = hd.MultiWorkerMirroredStrategy()
    work = calibrated_work(1e-3)
    grads = np.ones(1 << 16, np.float32)
    small = [np.ones(64, np.float32) for _ in range(20)]

    def step() -> None:
        strategy.run(work)
        comm.allreduce(grads)
        comm.grouped_allreduce(small)

    tmp = comm.broadcast_object(tempfile.mkdtemp() if comm.rank == 0 else None)
    times: dict[str, list[float]] = {"off": [], "on": []}
    trace = os.path.join(tmp, "trace.json")
    for r in range(ROUNDS):
        mode = "on" if r % 2 else "off"
        if mode == "on":
            timeline.start(trace)
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
        elapsed = (time.perf_counter() - t0) / STEPS
        if mode == "on":
            timeline.stop()
        times[mode].append(comm.allreduce(np.array([elapsed]), op="max")[0])
    med = {k: float(np.median(v)) for k, v in times.items()}
    if args.plot and comm.rank == 0:
        plot(trace, args.plot)
    emit(
        {
            "benchmark": "timeline",
            "ranks": comm.size,
            "step_ms": {k: v * 1e3 for k, v in med.items()},
            "rounds_ms": {k: [x * 1e3 for x in v] for k, v in times.items()},
            "cost_on_over_off": med["on"] / med["off"],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
