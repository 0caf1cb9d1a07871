"""All-reduce: hpcdist (MPI, SHM, RING, AUTO) against raw mpi4py ``Allreduce`` on the same buffers.

Run: ``mpiexec -n 2 python benchmarks/allreduce.py [--out results.json] [--plot plot.png]``.
Prints JSON: per message size, the median time of each implementation, its ratio to raw
``Allreduce`` (below 1 is faster than raw), the bus bandwidth ``2 (n-1)/n * bytes / time``, and a
numpy memcpy bandwidth for reference; then 200 small tensors (1-64 KiB) fused against a loop of
single all-reduces. ``auto_inplace`` is ``allreduce_`` (in place; its ratio is to raw
``Allreduce`` into a preallocated buffer, and ``auto_inplace_over_raw_inplace`` to raw
``Allreduce(MPI.IN_PLACE, x)``, MPICH's faster form from 128 KiB); the others return a new
array. ``--no-checks`` turns the cross-rank checks off.

Across nodes (``bash scripts/twonode.sh run 2+2 python benchmarks/allreduce.py --max-mib 64``:
two namespace nodes on one machine, TCP over veths) the SHM implementation is the hierarchical
backend (node reduce in shared memory, node leaders over MPI, node broadcast), reported as
``hierarchical``; ``raw`` and ``mpi`` are flat MPI over every rank.

``--gpu`` measures CuPy arrays on this rank's GPU instead: hpcdist with NCCL and with staging
through pinned host memory (``implementation="mpi"``) against raw NCCL (``cupy.cuda.nccl`` on
the same buffers) and raw staging (``get()``, ``Allreduce``, ``cupy.asarray``). Every timed call
ends with a stream synchronisation. Bandwidths are algorithm bandwidth ``bytes / time`` and bus
bandwidth ``2 (n-1)/n * bytes / time`` (zero on one rank, as nccl-tests report it).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, memcpy_bandwidth, time_collective

import hpcdist as hd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--min-kib", type=int, default=4)
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--impls", default="mpi,shm,ring,auto")
    parser.add_argument("--no-checks", action="store_true")
    parser.add_argument("--budget", type=float, default=0.6, help="seconds per size and variant")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size")
    parser.add_argument("--out")
    parser.add_argument("--plot")
    parser.add_argument("--gpu", action="store_true", help="CuPy arrays: NCCL and staging")
    args = parser.parse_args()
    if args.gpu:
        gpu_main(args)
        return

    settings = hd.settings.Settings.from_env(check_collectives=not args.no_checks)
    comm = hd.Communicator(settings=settings)
    raw = MPI.COMM_WORLD.Dup()
    n = comm.size
    sizes = []
    size = args.min_kib << 10
    while size <= args.max_mib << 20:
        sizes.append(size)
        size *= 4
    # across nodes the shared-memory implementation is the hierarchical backend
    names = {"shm": "hierarchical"} if comm.num_nodes > 1 else {}
    impls = args.impls.split(",")
    rows = []
    for nbytes in sizes:
        x = np.random.default_rng(comm.rank).random(nbytes // 4, dtype=np.float32)
        out = np.empty_like(x)
        zeros = np.zeros_like(x)  # in-place sums of zeros stay finite
        raw_zeros = np.zeros_like(x)
        budget = args.budget if nbytes < (64 << 20) else args.budget * 3
        calls = {"raw": lambda x=x, out=out: raw.Allreduce(x, out)}
        for impl in impls:
            opts = hd.CommunicationOptions(implementation=impl)
            calls[names.get(impl, impl)] = lambda o=opts, x=x: comm.allreduce(x, options=o)
        calls["auto_inplace"] = lambda z=zeros: comm.allreduce_(z)
        # MPICH's own in-place form (faster than its out-of-place one from 128 KiB): the
        # baseline for auto_inplace
        calls["raw_inplace"] = lambda z=raw_zeros: raw.Allreduce(MPI.IN_PLACE, z)
        # Interleaved rounds: each round times every variant once; ratios are taken within a
        # round (same machine state), then the median over rounds is reported.
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(args.rounds):
            for key, fn in calls.items():
                times[key].append(time_collective(fn, raw, budget_s=budget / args.rounds))
        row = {"bytes": nbytes}
        for key in calls:
            row[f"{key}_s"] = float(np.median(times[key]))
            row[f"{key}_busbw_GBs"] = 2 * (n - 1) / n * nbytes / row[f"{key}_s"] / 1e9
            if key != "raw":
                ratios = np.array(times[key]) / np.array(times["raw"])
                row[f"{key}_ratio"] = float(np.median(ratios))
        in_place = np.array(times["auto_inplace"]) / np.array(times["raw_inplace"])
        row["auto_inplace_over_raw_inplace"] = float(np.median(in_place))
        rows.append(row)
        if comm.rank == 0:
            print(
                f"{nbytes:>10} B raw {row['raw_s'] * 1e6:10.1f} us  "
                + "  ".join(f"{k} {row[f'{k}_ratio']:.2f}x" for k in calls if k != "raw"),
                file=sys.stderr,
            )

    rng = np.random.default_rng(comm.rank)
    small = [rng.random(int(k) * 256, dtype=np.float32) for k in rng.integers(1, 65, 200)]
    small = comm.broadcast_object([s.size for s in small])
    tensors = [np.ones(s, dtype=np.float32) for s in small]
    fused = time_collective(lambda: comm.grouped_allreduce(tensors), raw, budget_s=1.0)
    loop = time_collective(lambda: [comm.allreduce(t) for t in tensors], raw, budget_s=1.0)
    raw_loop = time_collective(
        lambda: [raw.Allreduce(t, np.empty_like(t)) for t in tensors], raw, budget_s=1.0
    )
    sweep = {}
    for pack in (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 0):
        opts = hd.CommunicationOptions(bytes_per_pack=pack)
        sweep[str(pack)] = time_collective(
            lambda o=opts: comm.grouped_allreduce(tensors, options=o), raw, budget_s=0.5
        )
    result = {
        "benchmark": "allreduce",
        "ranks": n,
        "nodes": comm.num_nodes,
        "ranks_per_node": comm.allgather_object(comm.local_size),
        "checks": not args.no_checks,
        "mpi_library": MPI.Get_library_version().splitlines()[0],
        "memcpy_GBs": {"4MiB": memcpy_bandwidth(4 << 20), "128MiB": memcpy_bandwidth(128 << 20)},
        "sizes": rows,
        "fusion": {
            "tensors": len(tensors),
            "total_bytes": int(sum(t.nbytes for t in tensors)),
            "fused_s": fused,
            "loop_s": loop,
            "raw_loop_s": raw_loop,
            "speedup_vs_loop": loop / fused,
            "speedup_vs_raw_loop": raw_loop / fused,
            "bytes_per_pack_sweep_s": sweep,
        },
    }
    emit(result, args.out)
    if args.plot and comm.rank == 0:
        plot(result, args.plot, [names.get(impl, impl) for impl in impls])


def gpu_main(args: argparse.Namespace) -> None:
    """The ``--gpu`` measurement (see the module docstring)."""
    import cupy
    from cupy.cuda import nccl

    from hpcdist.cluster.gpus import bind_gpu

    bind_gpu()
    comm = hd.Communicator()
    raw = MPI.COMM_WORLD.Dup()
    n = comm.size
    uid = raw.bcast(nccl.get_unique_id() if raw.Get_rank() == 0 else None, root=0)
    raw_nccl = nccl.NcclCommunicator(n, uid, raw.Get_rank())
    stream = cupy.cuda.get_current_stream()
    opts = {
        "nccl": hd.CommunicationOptions(implementation="nccl"),
        "staged": hd.CommunicationOptions(implementation="mpi"),
    }
    rows = []
    size = args.min_kib << 10
    while size <= args.max_mib << 20:
        x = cupy.random.default_rng(comm.rank).random(size // 4, dtype=cupy.float32)
        out = cupy.empty_like(x)

        def raw_nccl_call(x=x, out=out):
            raw_nccl.allReduce(x.data.ptr, out.data.ptr, x.size, nccl.NCCL_FLOAT32, 0, stream.ptr)
            stream.synchronize()

        def raw_staged_call(x=x):
            host = x.get()
            raw.Allreduce(MPI.IN_PLACE, host)
            return cupy.asarray(host)

        calls = {"raw_nccl": raw_nccl_call, "raw_staged": raw_staged_call}
        for key, o in opts.items():
            calls[key] = lambda o=o, x=x: (comm.allreduce(x, options=o), stream.synchronize())
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(args.rounds):
            for key, fn in calls.items():
                times[key].append(time_collective(fn, raw, budget_s=args.budget / args.rounds))
        row = {"bytes": size}
        for key in calls:
            t = float(np.median(times[key]))
            row[f"{key}_s"] = t
            row[f"{key}_algbw_GBs"] = size / t / 1e9
            row[f"{key}_busbw_GBs"] = 2 * (n - 1) / n * size / t / 1e9
        for key, base in (("nccl", "raw_nccl"), ("staged", "raw_staged")):
            row[f"{key}_ratio"] = float(np.median(np.array(times[key]) / np.array(times[base])))
        rows.append(row)
        if comm.rank == 0:
            print(
                f"{size:>10} B nccl {row['nccl_algbw_GBs']:8.1f} GB/s ({row['nccl_ratio']:.2f}x "
                f"raw) staged {row['staged_algbw_GBs']:8.2f} GB/s "
                f"({row['staged_ratio']:.2f}x raw)",
                file=sys.stderr,
            )
        size *= 4
    copy = cupy.empty(64 << 18, dtype=cupy.float32)
    src = cupy.ones_like(copy)
    copy_s = time_collective(lambda: (copy.__setitem__(Ellipsis, src), stream.synchronize()), raw)
    result = {
        "benchmark": "allreduce_gpu",
        "ranks": n,
        "device": cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode(),
        "nccl_version": nccl.get_version(),
        "mpi_library": MPI.Get_library_version().splitlines()[0],
        "device_copy_GBs_64MiB": 2 * copy.nbytes / copy_s / 1e9,
        "sizes": rows,
    }
    emit(result, args.out)


def plot(result: dict, path: str, impls: list[str]) -> None:
    """Bus bandwidth against message size, with the memcpy line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["bytes"] for r in result["sizes"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key in ["raw", *impls, "auto_inplace"]:
        label = "raw mpi4py Allreduce" if key == "raw" else f"hpcdist {key}"
        ax.plot(sizes, [r[f"{key}_busbw_GBs"] for r in result["sizes"]], marker="o", label=label)
    ax.axhline(result["memcpy_GBs"]["128MiB"], ls="--", c="gray", label="numpy memcpy (128 MiB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"all-reduce, {result['ranks']} ranks, float32")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
