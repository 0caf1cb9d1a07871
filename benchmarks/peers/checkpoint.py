"""Checkpoint save and restore against the peers: 1 GiB (16 x 64 MiB float32), one process.

Run (from the peers' venv, see ``scripts/bench_peers.sh``): ``python
benchmarks/peers/checkpoint.py [--rounds 3] [--dir /tmp] [--out r.json] [--plot r.png]``. Each
round starts every contender once, in its own process (the order rotates): it fills its 16
variables, times one write, overwrites the variables with zeros, times one restore into them,
and checks every restored byte (outside the timings). Every write is made durable: hpcdist
fsyncs its file and directory itself; the peers' files and directory are fsynced after their
write, inside the timing. Restores read files that were just written (page cache) for all.
Medians over rounds; ratios are peer time / hpcdist time within a round (above 1: hpcdist is
faster).

- ``hpcdist``: ``Checkpoint.write`` (one HDF5 file, fsynced) and ``Checkpoint.read`` into the
  variables;
- ``torch``: ``torch.save`` of the dict of tensors (+ fsync) and ``torch.load`` followed by
  ``copy_`` into the existing tensors (what ``load_state_dict`` does);
- ``tf``: ``tf.train.Checkpoint.write`` (index and data files, + fsync) and
  ``tf.train.Checkpoint.read`` into the variables (``tf.Variable``).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
from _common import (
    RATIO_NOTE,
    bar_plot,
    driver_parser,
    emit,
    launch_round,
    machine,
    write_result,
)

NAMES = ("hpcdist", "torch", "tf")
PER = 16 << 20  # float32 elements: 64 MiB


def arrays(count: int) -> dict[str, np.ndarray]:
    """``count`` distinct 64 MiB float32 arrays (cheap to make, nothing repeats within one)."""
    out = {}
    for i in range(count):
        a = np.arange(PER, dtype=np.float32)
        a += i
        out[f"v{i}"] = a
    return out


def fsync_paths(paths: list[str]) -> None:
    """Flush the files and their directory to the disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(os.path.dirname(paths[0]), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def verify(got: dict[str, np.ndarray], want: dict[str, np.ndarray], who: str) -> None:
    for k, a in want.items():
        if not np.array_equal(got[k], a):
            raise SystemExit(f"{who}: restored {k} differs from what was written")


def worker_hpcdist(want: dict[str, np.ndarray], root: str) -> tuple[float, float]:
    import hpcdist as hd

    strategy = hd.get_strategy()
    variables = {k: strategy.Variable(a) for k, a in want.items()}
    ckpt = hd.Checkpoint(**variables)
    path = os.path.join(root, "hd")
    t0 = time.perf_counter()
    ckpt.write(path)  # fsyncs the file and its directory
    write_s = time.perf_counter() - t0
    for v in variables.values():
        v.assign(np.zeros(PER, np.float32))
    t0 = time.perf_counter()
    ckpt.read(path + ".h5")
    read_s = time.perf_counter() - t0
    verify({k: v.numpy() for k, v in variables.items()}, want, "hpcdist")
    return write_s, read_s


def worker_torch(want: dict[str, np.ndarray], root: str) -> tuple[float, float]:
    import torch

    torch.set_num_threads(1)
    tensors = {k: torch.from_numpy(a.copy()) for k, a in want.items()}
    path = os.path.join(root, "model.pt")
    t0 = time.perf_counter()
    torch.save(tensors, path)
    fsync_paths([path])
    write_s = time.perf_counter() - t0
    for t in tensors.values():
        t.zero_()
    t0 = time.perf_counter()
    loaded = torch.load(path)
    for k, t in tensors.items():
        t.copy_(loaded[k])
    read_s = time.perf_counter() - t0
    del loaded
    verify({k: t.numpy() for k, t in tensors.items()}, want, "torch")
    return write_s, read_s


def worker_tf(want: dict[str, np.ndarray], root: str) -> tuple[float, float]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    variables = {k: tf.Variable(a) for k, a in want.items()}
    ckpt = tf.train.Checkpoint(**variables)
    prefix = os.path.join(root, "ckpt")
    t0 = time.perf_counter()
    ckpt.write(prefix)
    fsync_paths(sorted(glob.glob(prefix + ".*")))
    write_s = time.perf_counter() - t0
    for v in variables.values():
        v.assign(tf.zeros([PER]))
    t0 = time.perf_counter()
    ckpt.read(prefix).assert_consumed()
    read_s = time.perf_counter() - t0
    verify({k: v.numpy() for k, v in variables.items()}, want, "tf")
    return write_s, read_s


def run_rounds(
    args: argparse.Namespace, workers: list[str], passed: list[str], base: str
) -> tuple[list[dict[str, float]], list[dict[str, float]], list[str]]:
    """Every round starts each contender once (rotating order): write and read times, errors."""
    passed = [*passed, "--dir", base]
    writes: list[dict[str, float]] = []
    reads: list[dict[str, float]] = []
    errors: list[str] = []
    for r in range(args.rounds):
        w_round: dict[str, float] = {}
        r_round: dict[str, float] = {}
        for w, res in launch_round(__file__, workers, r, passed, args.timeout, errors, ranks=1):
            w_round[w], r_round[w] = res["write_s"], res["read_s"]
        writes.append(w_round)
        reads.append(r_round)
        print(f"round {r + 1}/{args.rounds}: write {w_round} read {r_round}", file=sys.stderr)
    return writes, reads, errors


def main() -> None:
    parser = driver_parser(__doc__, NAMES, rounds=3)
    parser.add_argument("--variables", type=int, default=16, help="64 MiB each")
    parser.add_argument("--dir", help="where the files go (default: the temporary directory)")
    args = parser.parse_args()
    if args.worker:
        root = tempfile.mkdtemp(prefix=f"peers-ckpt-{args.worker}-", dir=args.dir)
        try:
            run = {"hpcdist": worker_hpcdist, "torch": worker_torch, "tf": worker_tf}
            write_s, read_s = run[args.worker](arrays(args.variables), root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        write_result(args.result, {"write_s": write_s, "read_s": read_s})
        return

    workers = args.workers.split(",")
    base = tempfile.mkdtemp(prefix="peers-ckpt-", dir=args.dir)  # removed even if a worker dies
    try:
        writes, reads, errors = run_rounds(
            args, workers, ["--variables", str(args.variables)], base
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    nbytes = args.variables * PER * 4
    rows: dict[str, Any] = {}
    for name in NAMES:
        row: dict[str, Any] = {}
        for what, rounds in (("write", writes), ("read", reads)):
            times = [rd[name] for rd in rounds if name in rd]
            if not times:
                continue
            row[f"{what}_s"] = float(np.median(times))
            row[f"{what}_GBs"] = nbytes / row[f"{what}_s"] / 1e9
            if name != "hpcdist":
                ratios = [
                    rd[name] / rd["hpcdist"] for rd in rounds if name in rd and "hpcdist" in rd
                ]
                if ratios:
                    row[f"{what}_ratio"] = float(np.median(ratios))
        if row:
            rows[name] = row
    result = {
        "benchmark": "peers_checkpoint",
        "bytes": nbytes,
        "variables": args.variables,
        "rounds": args.rounds,
        "ratio": RATIO_NOTE,
        "fsync": "every write: hpcdist by itself; torch and tf files + directory after the write",
        "machine": machine(),
        "contenders": rows,
        "errors": errors,
    }
    emit(result, args.out)
    if args.plot:
        bar_plot(
            args.plot,
            f"checkpoint of {nbytes / 2**30:g} GiB ({args.variables} x 64 MiB float32), fsynced",
            "GB/s (median)",
            {
                what: {k: v[f"{what}_GBs"] for k, v in rows.items() if f"{what}_GBs" in v}
                for what in ("write", "read")
            },
            RATIO_NOTE,
        )


if __name__ == "__main__":
    main()
