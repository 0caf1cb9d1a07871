"""Checkpoint throughput against raw h5py and a raw file write, and the step stall of async saves.

Run: ``python benchmarks/checkpoint.py [--gib 1.0] [--dir /tmp/x] [--out results.json]``.
Variables of 64 MiB each, ~1 GiB in all (float32). Same arrays, same directory, same run:
hpcdist `Checkpoint.write` and `restore`, raw ``h5py`` writing/reading the same datasets, and a
raw ``numpy.tofile`` of the bytes (each write fsynced, medians of ``--reps``). Then the stall: a
"training step" loop while an async save runs, against the same loop without a save.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import emit, median_time

import hpcdist as hd


def fsync(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir")
    parser.add_argument("--out")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="hpcdist-ckpt-bench-", dir=args.dir)
    per = 16 << 20  # float32 elements: 64 MiB
    count = max(1, int(args.gib * (1 << 30) / (per * 4)))
    rng = np.random.default_rng(0)
    arrays = {f"v{i}": rng.random(per, dtype=np.float32) for i in range(count)}
    nbytes = sum(a.nbytes for a in arrays.values())
    variables = {k: hd.get_strategy().Variable(a) for k, a in arrays.items()}
    ckpt = hd.Checkpoint(**variables)
    try:
        path = os.path.join(root, "hd")
        raw = os.path.join(root, "raw.h5")
        blob = os.path.join(root, "raw.bin")

        def h5_write() -> None:
            with h5py.File(raw, "w") as f:
                for k, a in arrays.items():
                    f.create_dataset(k, data=a)
            fsync(raw)

        def h5_read() -> None:
            with h5py.File(raw, "r") as f:
                for k in arrays:
                    f[k][()]

        def file_write() -> None:
            with open(blob, "wb") as f:
                for a in arrays.values():
                    a.tofile(f)
                f.flush()
                os.fsync(f.fileno())

        # Interleaved: every repetition times each variant once, so the disk's mood is shared.
        times: dict[str, list[float]] = {k: [] for k in ("hd_w", "h5_w", "file_w", "hd_r", "h5_r")}
        for _ in range(args.reps):
            times["hd_w"].append(median_time(lambda: ckpt.write(path), 1))
            times["h5_w"].append(median_time(h5_write, 1))
            times["file_w"].append(median_time(file_write, 1))
            times["hd_r"].append(median_time(lambda: ckpt.read(path + ".h5"), 1))
            times["h5_r"].append(median_time(h5_read, 1))
        hd_write, h5_w, file_w, hd_read, h5_r = (float(np.median(times[k])) for k in times)

        # Stall: steps of ~5 ms of numpy work, with and without an async save in flight.
        work = rng.random((256, 256))

        def steps(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                for _ in range(10):
                    np.tanh(work @ work)
                out.append(time.perf_counter() - t0)
            return out

        quiet = steps(20)
        options = hd.CheckpointOptions(experimental_enable_async_checkpoint=True)
        t0 = time.perf_counter()
        ckpt.write(os.path.join(root, "async"), options)
        snapshot_s = time.perf_counter() - t0
        during = steps(20)
        ckpt.sync()
        result = {
            "benchmark": "checkpoint",
            "bytes": nbytes,
            "variables": count,
            "hpcdist_write_GBs": nbytes / hd_write / 1e9,
            "h5py_write_GBs": nbytes / h5_w / 1e9,
            "file_write_GBs": nbytes / file_w / 1e9,
            "write_vs_h5py": h5_w / hd_write,
            "hpcdist_read_GBs": nbytes / hd_read / 1e9,
            "h5py_read_GBs": nbytes / h5_r / 1e9,
            "read_vs_h5py": h5_r / hd_read,
            "async_snapshot_s": snapshot_s,
            "step_ms_quiet": float(np.median(quiet) * 1e3),
            "step_ms_during_async_save": float(np.median(during) * 1e3),
        }
        print(
            f"write {result['hpcdist_write_GBs']:.2f} GB/s vs h5py {result['h5py_write_GBs']:.2f} "
            f"({result['write_vs_h5py'] * 100:.0f}%), file {result['file_write_GBs']:.2f}; read "
            f"{result['hpcdist_read_GBs']:.2f} vs {result['h5py_read_GBs']:.2f} "
            f"({result['read_vs_h5py'] * 100:.0f}%); async snapshot {snapshot_s * 1e3:.0f} ms, "
            f"step {result['step_ms_quiet']:.2f} -> {result['step_ms_during_async_save']:.2f} ms",
            file=sys.stderr,
        )
        emit(result, args.out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
