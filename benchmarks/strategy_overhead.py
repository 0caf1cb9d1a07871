"""Cost of ``strategy.run`` + ``strategy.reduce`` per step against a plain call + raw Allreduce.

Run: ``mpiexec -n 2 python benchmarks/strategy_overhead.py [--out results.json]``. The step is
a calibrated numpy computation of about 0.1, 1 and 10 ms (one BLAS thread per rank) that returns
a loss value; hpcdist runs it under MultiWorkerMirroredStrategy and reduces the loss with SUM,
the baseline calls it directly and sums the loss with mpi4py ``comm.Allreduce``. Interleaved
rounds; reported: median step time of each and the relative overhead.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, time_collective  # noqa: E402

import hpcdist as hd  # noqa: E402


def calibrated_step(target_s: float, rng: np.random.Generator):
    """A function that multiplies small matrices for about ``target_s`` seconds."""
    a = rng.standard_normal((64, 64)) / 8
    b = rng.standard_normal((64, 64)) / 8

    def work(iters: int) -> np.ndarray:
        x = a
        for _ in range(iters):
            x = np.tanh(x @ b)
        return np.array([float(x.sum())])

    t0 = time.perf_counter()
    work(200)
    per_iter = (time.perf_counter() - t0) / 200
    iters = max(1, round(target_s / per_iter))
    iters = MPI.COMM_WORLD.allreduce(iters, op=MPI.MIN)  # same work on every rank
    return lambda: work(iters), iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps-ms", default="0.1,1,10")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--budget", type=float, default=1.0, help="seconds per step size and variant"
    )
    parser.add_argument("--out")
    args = parser.parse_args()

    raw = MPI.COMM_WORLD.Dup()
    strategy = hd.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    rows = []
    for ms in (float(x) for x in args.steps_ms.split(",")):
        step, iters = calibrated_step(ms / 1e3, rng)
        out = np.empty(1)

        def baseline(step=step, out=out) -> None:
            loss = step()
            raw.Allreduce(loss, out)

        def hpcdist_step(step=step) -> None:
            strategy.reduce("sum", strategy.run(step), axis=None)

        times: dict[str, list[float]] = {"baseline": [], "hpcdist": []}
        for _ in range(args.rounds):
            times["baseline"].append(
                time_collective(baseline, raw, budget_s=args.budget / args.rounds)
            )
            times["hpcdist"].append(
                time_collective(hpcdist_step, raw, budget_s=args.budget / args.rounds)
            )
        ratios = np.array(times["hpcdist"]) / np.array(times["baseline"])
        row = {
            "target_step_ms": ms,
            "iterations": iters,
            "baseline_s": float(np.median(times["baseline"])),
            "hpcdist_s": float(np.median(times["hpcdist"])),
            "overhead": float(np.median(ratios) - 1),
        }
        rows.append(row)
        if raw.rank == 0:
            print(
                f"step {ms:5.1f} ms: baseline {row['baseline_s'] * 1e3:8.3f} ms  hpcdist "
                f"{row['hpcdist_s'] * 1e3:8.3f} ms  overhead {row['overhead'] * 100:+.1f}%",
                file=sys.stderr,
            )
    emit(
        {
            "benchmark": "strategy_overhead",
            "ranks": raw.size,
            "strategy": "MultiWorkerMirroredStrategy",
            "steps": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
