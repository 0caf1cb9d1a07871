"""Checkpoint throughput against raw h5py and a raw file write, and the step stall of async saves.

Run: ``python benchmarks/checkpoint.py [--gib 1.0] [--reps 5] [--dir /tmp/x] [--out r.json]``.
Variables of 64 MiB each, ~1 GiB in all (float32). Same arrays, same directory, same run,
interleaved (each repetition times every variant once), medians of ``--reps``:

- write: hpcdist `Checkpoint.write` (checksums, temporary file, fsync, rename, directory fsync)
  against raw ``h5py`` writing the same datasets then fsyncing the file, and a raw
  ``numpy.tofile`` of the bytes (fsynced);
- restore (warm cache): hpcdist `Checkpoint.restore` (every checksum verified before any
  variable changes, then assigned) against raw ``h5py`` ``read_direct`` into preallocated
  arrays (no check), and h5py's allocating read ``dset[()]``.

``write_ratio`` and ``restore_ratio`` are hpcdist's median time over raw h5py's (1.0: as fast;
the target is at most 1.25). Then the stall: a "training step" loop while an async save runs,
against the same loop without a save; the async save's snapshot (host copies of the variables)
against numpy copying the same arrays into fresh memory, and a second async save (which refills
the first one's copies) against numpy copying into kept arrays.
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
    parser.add_argument("--reps", type=int, default=5)
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

        targets = {k: np.empty_like(a) for k, a in arrays.items()}
        for t in targets.values():
            t.fill(0)  # touched once, as a model's variables are

        def h5_read_direct() -> None:
            with h5py.File(raw, "r") as f:
                for k, t in targets.items():
                    f[k].read_direct(t)

        def file_write() -> None:
            with open(blob, "wb") as f:
                for a in arrays.values():
                    a.tofile(f)
                f.flush()
                os.fsync(f.fileno())

        variants = {
            "hd_w": lambda: ckpt.write(path),
            "h5_w": h5_write,
            "file_w": file_write,
            "hd_r": lambda: ckpt.restore(path + ".h5"),
            "h5_rd": h5_read_direct,
            "h5_r": h5_read,
        }
        variants["hd_w"]()
        variants["h5_w"]()  # the files exist and are cached before the first timed restore
        for var in variables.values():
            var.assign(np.zeros(per, np.float32), read_value=False)
        variants["hd_r"]()
        h5_read_direct()
        for k, a in arrays.items():  # the restore (and the raw read) really read the values
            assert np.array_equal(variables[k].numpy(), a) and np.array_equal(targets[k], a), k
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.reps):
            for key, fn in variants.items():
                times[key].append(median_time(fn, 1))
        med = {k: float(np.median(v)) for k, v in times.items()}

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
        # The next asynchronous save refills the first one's host copies (no fresh pages).
        t0 = time.perf_counter()
        ckpt.write(os.path.join(root, "async2"), options)
        again_s = time.perf_counter() - t0
        ckpt.sync()
        # Raw baseline: numpy copies of the same arrays into fresh memory, and into kept arrays.
        t0 = time.perf_counter()
        fresh = [np.array(a, copy=True) for a in arrays.values()]
        fresh_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for kept, a in zip(fresh, arrays.values(), strict=True):
            np.copyto(kept, a)
        refill_s = time.perf_counter() - t0
        del fresh
        result = {
            "benchmark": "checkpoint",
            "bytes": nbytes,
            "variables": count,
            "reps": args.reps,
            "hpcdist_write_GBs": nbytes / med["hd_w"] / 1e9,
            "h5py_write_GBs": nbytes / med["h5_w"] / 1e9,
            "file_write_GBs": nbytes / med["file_w"] / 1e9,
            "write_vs_h5py": med["h5_w"] / med["hd_w"],
            "write_ratio": med["hd_w"] / med["h5_w"],
            "hpcdist_read_GBs": nbytes / med["hd_r"] / 1e9,
            "h5py_read_direct_GBs": nbytes / med["h5_rd"] / 1e9,
            "h5py_read_GBs": nbytes / med["h5_r"] / 1e9,
            "read_vs_h5py": med["h5_r"] / med["hd_r"],
            "restore_ratio": med["hd_r"] / med["h5_rd"],
            "seconds": {k: [round(t, 4) for t in v] for k, v in times.items()},
            "async_snapshot_s": snapshot_s,
            "async_snapshot_again_s": again_s,
            "raw_fresh_copy_s": fresh_s,
            "raw_refill_copy_s": refill_s,
            "async_snapshot_over_raw_fresh_copy": snapshot_s / fresh_s,
            "async_snapshot_again_over_raw_refill": again_s / refill_s,
            "step_ms_quiet": float(np.median(quiet) * 1e3),
            "step_ms_during_async_save": float(np.median(during) * 1e3),
        }
        print(
            f"write {result['hpcdist_write_GBs']:.2f} GB/s vs h5py {result['h5py_write_GBs']:.2f} "
            f"(ratio {result['write_ratio']:.2f}), file {result['file_write_GBs']:.2f}; restore "
            f"{result['hpcdist_read_GBs']:.2f} vs read_direct {result['h5py_read_direct_GBs']:.2f} "
            f"(ratio {result['restore_ratio']:.2f}), h5py read {result['h5py_read_GBs']:.2f}; "
            f"async snapshot {snapshot_s * 1e3:.0f} ms (raw fresh copy {fresh_s * 1e3:.0f}, "
            f"ratio {snapshot_s / fresh_s:.2f}), again {again_s * 1e3:.0f} ms (raw refill "
            f"{refill_s * 1e3:.0f}, ratio {again_s / refill_s:.2f}), "
            f"step {result['step_ms_quiet']:.2f} -> {result['step_ms_during_async_save']:.2f} ms",
            file=sys.stderr,
        )
        emit(result, args.out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
