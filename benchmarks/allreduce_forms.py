"""Out-of-place against in-place all-reduce, and fused against per-tensor, beside raw mpi4py.

Run: ``mpiexec -n 2 python benchmarks/allreduce_forms.py [--out results.json]``.

- ``forms``: at 4 KiB ... 64 MiB of float32, ``y = comm.allreduce(x)`` (a new result each
  call, the previous one dropped) against ``comm.allreduce_(x)`` (in place) and raw
  ``MPI.Allreduce(x, y)`` into a preallocated ``y`` and raw ``Allreduce(MPI.IN_PLACE, x)``;
  medians of synchronised repetitions, interleaved; ratios out-of-place / in-place, / raw,
  and in-place / raw in place (MPICH's in-place form is the faster one from 128 KiB).
- ``fusion``: 200 tensors of 1-64 KiB (the same sizes on every rank):
  ``grouped_allreduce`` (new results) and ``grouped_allreduce_`` (in place) at several
  ``bytes_per_pack`` (64 KiB ... 64 MiB, and 0: one pack) against a loop of ``allreduce_``
  (in place), a loop of ``allreduce`` (new results) and a loop of raw ``Allreduce``. Each
  contender is timed once per round, all interleaved; each ratio is the median over rounds of
  that round's ratio, which the machine's load drifts affect less than a ratio of medians:
  ``fused_over_loop_by_pack`` (``grouped_allreduce`` / ``allreduce_`` loop),
  ``fused_in_place_over_loop_by_pack`` (``grouped_allreduce_`` / ``allreduce_`` loop) and
  ``fused_over_loop_out_of_place_by_pack`` (``grouped_allreduce`` / ``allreduce`` loop).

``--only fusion`` (or ``forms``) runs one part; ``--rounds`` sets the rounds.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, time_collective  # noqa: E402

import hpcdist as hd  # noqa: E402

SIZES = (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
ROUNDS = 3
PACKS = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20, 0)


def forms(comm, raw, rounds: int = ROUNDS) -> list[dict]:
    rows = []
    for nbytes in SIZES:
        x = np.zeros(nbytes // 4, np.float32)  # in-place sums of zeros stay zero
        y = np.empty_like(x)
        budget = 0.4 if nbytes < (16 << 20) else 1.5
        calls = {
            "out_of_place": lambda x=x: comm.allreduce(x),
            "in_place": lambda x=x: comm.allreduce_(x),
            "raw": lambda x=x, y=y: raw.Allreduce(x, y),
            "raw_in_place": lambda x=x: raw.Allreduce(MPI.IN_PLACE, x),
        }
        times = {k: [] for k in calls}
        for _ in range(rounds):
            for key, fn in calls.items():
                times[key].append(time_collective(fn, raw, budget_s=budget))
        med = {k: float(np.median(v)) for k, v in times.items()}
        rows.append(
            {
                "bytes": nbytes,
                "us": {k: v * 1e6 for k, v in med.items()},
                "out_over_in": med["out_of_place"] / med["in_place"],
                "out_over_raw": med["out_of_place"] / med["raw"],
                "in_over_raw": med["in_place"] / med["raw"],
                "in_over_raw_in_place": med["in_place"] / med["raw_in_place"],
            }
        )
    return rows


def fusion(comm, raw, rounds: int = ROUNDS) -> dict:
    rng = np.random.default_rng(0)
    sizes = [int(k) * 256 for k in rng.integers(1, 65, 200)]  # 1-64 KiB of float32
    tensors = [np.ones(s, np.float32) for s in sizes]
    outs = [np.empty_like(t) for t in tensors]
    calls = {
        "loop_inplace": lambda: [comm.allreduce_(t) for t in tensors],
        "loop_out_of_place": lambda: [comm.allreduce(t) for t in tensors],
        "raw_loop": lambda: [raw.Allreduce(t, o) for t, o in zip(tensors, outs, strict=True)],
    }
    for pack in PACKS:
        opts = hd.CommunicationOptions(bytes_per_pack=pack)
        calls[f"fused_{pack}"] = lambda o=opts: comm.grouped_allreduce(tensors, options=o)
        if hasattr(comm, "grouped_allreduce_"):  # older trees lack it (before/after runs)
            calls[f"inplace_{pack}"] = lambda o=opts: comm.grouped_allreduce_(tensors, options=o)
    calls["fused_default"] = lambda: comm.grouped_allreduce(tensors)
    times = {k: [] for k in calls}
    for _ in range(rounds):
        for key, fn in calls.items():
            times[key].append(time_collective(fn, raw, budget_s=0.6))
            for t in tensors:  # the in-place calls double them: keep the values finite
                t.fill(1.0)
    med = {k: float(np.median(v)) for k, v in times.items()}

    def ratios(prefix: str, over: str) -> dict[str, float]:
        base = np.array(times[over])
        return {
            k[len(prefix) :]: float(np.median(np.array(v) / base))
            for k, v in times.items()
            if k.startswith(prefix)
        }

    return {
        "tensors": len(tensors),
        "bytes": int(sum(sizes) * 4),
        "rounds": rounds,
        "ms": {k: v * 1e3 for k, v in med.items()},
        "fused_default_over_loop": ratios("fused_", "loop_inplace").pop("default"),
        "fused_over_loop_by_pack": ratios("fused_", "loop_inplace"),
        "fused_in_place_over_loop_by_pack": ratios("inplace_", "loop_inplace"),
        "fused_over_loop_out_of_place_by_pack": ratios("fused_", "loop_out_of_place"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", choices=("forms", "fusion"), default=None)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    comm = hd.comm.world()
    raw = MPI.COMM_WORLD.Dup()
    result = {"benchmark": "allreduce_forms", "ranks": comm.size}
    if args.only in (None, "forms"):
        result["forms"] = forms(comm, raw, args.rounds)
    if args.only in (None, "fusion"):
        result["fusion"] = fusion(comm, raw, args.rounds)
    emit(result, args.out)


if __name__ == "__main__":
    main()
