"""Input pipeline throughput against tf.data: read + parse + batch of the same TFRecord files.

Run (from a venv with TensorFlow and hpcdist, e.g. ``.venv-conformance`` or the peers' venv of
``scripts/bench_peers.sh``): ``python benchmarks/peers/input.py [--mib 1024] [--rounds 3]
[--threads 1,2] [--dir /tmp] [--out r.json]``. The driver writes ``--mib`` MiB of TFRecord
files once (8 files of ``tf.train.Example`` records, each a 784-float ``x`` and an int64 ``y``,
as MNIST-like data; hpcdist's writer, whose files are byte for byte TF's), then every round
starts each contender once per thread count, in its own process (the order rotates), and times
one full pass of::

    TFRecordDataset(files, num_parallel_reads=threads).batch(256)
        .map(parse_example(spec), num_parallel_calls=threads).prefetch(1)

tf.data runs with a private thread pool of ``threads`` threads and one intra-op thread; hpcdist
with ``threads`` map threads, and with one thread without pool or prefetch (all in the
iterating thread: a one-thread pool would only add hand-offs between threads that all need
the GIL). The figure is records per second; the ratio is tf.data's time /
hpcdist's time within a round (above 1: hpcdist is faster), medians over rounds, printed as
JSON.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
from _common import RATIO_NOTE, driver_parser, emit, launch_round, machine, write_result

NAMES = ("hpcdist", "tf")
FILES = 8
BATCH = 256
FEATURES = 784


def write_files(directory: str, mib: int) -> tuple[list[str], int]:
    """``FILES`` TFRecord files of about ``mib`` MiB in all; (paths, records)."""
    import hpcdist.io as hdio

    example = hdio.example_proto.Example()
    example.features.feature["x"].float_list.value.extend(np.linspace(0, 1, FEATURES).tolist())
    example.features.feature["y"].int64_list.value.append(7)
    record = example.SerializeToString()
    total = max(FILES, (mib << 20) // (len(record) + 16))
    paths = []
    for k in range(FILES):
        path = os.path.join(directory, f"part-{k}.tfrecord")
        with hdio.TFRecordWriter(path) as writer:
            for _ in range(total // FILES):
                writer.write(record)
        paths.append(path)
    return paths, (total // FILES) * FILES


def worker_hpcdist(paths: list[str], threads: int) -> tuple[float, int]:
    import hpcdist as hd
    import hpcdist.io as hdio

    spec = {
        "x": hdio.FixedLenFeature([FEATURES], hd.float32),
        "y": hdio.FixedLenFeature([], hd.int64),
    }
    records = hd.data.TFRecordDataset(paths, num_parallel_reads=threads).batch(BATCH)
    if threads == 1:  # one thread: everything in the iterating thread (no pool, no prefetch)
        dataset = records.map(lambda r: hdio.parse_example(r, spec))
    else:
        dataset = records.map(
            lambda r: hdio.parse_example(r, spec), num_parallel_calls=threads
        ).prefetch(1)
    t0 = time.perf_counter()
    count = sum(int(batch["y"].shape[0]) for batch in dataset)
    return time.perf_counter() - t0, count


def worker_tf(paths: list[str], threads: int) -> tuple[float, int]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    spec = {
        "x": tf.io.FixedLenFeature([FEATURES], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.autotune.enabled = False
    dataset = (
        tf.data.TFRecordDataset(paths, num_parallel_reads=threads)
        .batch(BATCH)
        .map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=threads)
        .prefetch(1)
        .with_options(options)
    )
    t0 = time.perf_counter()
    count = sum(int(batch["y"].shape[0]) for batch in dataset)
    return time.perf_counter() - t0, count


def main() -> None:
    parser = driver_parser(__doc__, NAMES, rounds=3)
    parser.add_argument("--mib", type=int, default=1024, help="MiB of TFRecord files")
    parser.add_argument("--threads", default="1,2", help="thread counts to measure")
    parser.add_argument("--dir", help="where the files go (default: the temporary directory)")
    parser.add_argument("--files", help=argparse_hidden())
    args = parser.parse_args()
    if args.worker:
        paths = args.files.split(",")
        run = {"hpcdist": worker_hpcdist, "tf": worker_tf}
        seconds, count = run[args.worker](paths, int(args.threads))
        write_result(args.result, {"seconds": seconds, "records": count})
        return

    base = tempfile.mkdtemp(prefix="peers-input-", dir=args.dir)
    rows: dict[str, Any] = {}
    errors: list[str] = []
    try:
        paths, records = write_files(base, args.mib)
        size = sum(os.path.getsize(p) for p in paths)
        for threads in [int(t) for t in args.threads.split(",")]:
            passed = ["--files", ",".join(paths), "--threads", str(threads)]
            rounds = []
            for r in range(args.rounds):
                got = {}
                for w, res in launch_round(
                    __file__, args.workers.split(","), r, passed, args.timeout, errors, ranks=1
                ):
                    if res["records"] != records:
                        errors.append(f"{w}: read {res['records']} records of {records}")
                        continue
                    got[w] = res["seconds"]
                rounds.append(got)
                print(f"threads {threads} round {r + 1}/{args.rounds}: {got}", file=sys.stderr)
            row: dict[str, Any] = {}
            for name in NAMES:
                times = [rd[name] for rd in rounds if name in rd]
                if times:
                    row[f"{name}_records_per_s"] = records / float(np.median(times))
            ratios = [rd["tf"] / rd["hpcdist"] for rd in rounds if {"tf", "hpcdist"} <= set(rd)]
            if ratios:
                row["ratio"] = float(np.median(ratios))
            rows[f"{threads}_threads"] = row
    finally:
        shutil.rmtree(base, ignore_errors=True)
    emit(
        {
            "benchmark": "peers_input",
            "bytes": size,
            "records": records,
            "pipeline": "TFRecordDataset -> batch(256) -> map(parse_example) -> prefetch(1)",
            "rounds": args.rounds,
            "ratio": RATIO_NOTE,
            "machine": machine(),
            "results": rows,
            "errors": errors,
        },
        args.out,
    )


def argparse_hidden() -> str:
    """Help text of the option the driver passes to its workers."""
    return "(set by the driver) comma-separated TFRecord files"


if __name__ == "__main__":
    main()
