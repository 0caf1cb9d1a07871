"""In-memory input pipelines: batches per second of hpcdist.data against tf.data, one thread each.

The data is 60,000 rows of 784 float32 features and an int64 label (MNIST's shape). Three
pipelines, one epoch (938 batches of 64) per measurement:

- ``batch``: ``from_tensor_slices((x, y)).batch(64)``
- ``shuffle_batch``: ``from_tensor_slices((x, y)).shuffle(10000, seed=1).batch(64)``
- ``map_batch``: ``from_tensor_slices((x, y)).map(f).batch(64)`` with the Python function
  ``f(x, y) = (x * 2, y)`` (hpcdist calls it per element; tf.data traces it into a graph)

Each side runs in a worker process of its own (hpcdist: ``--hpcdist-python``, default this
interpreter, with the environment's ``PYTHONPATH``, so ``PYTHONPATH=/tmp/old_checkout`` measures
another version; TensorFlow: ``--tf-python``, default ``.venv-conformance/bin/python``). tf.data
runs with ``options.threading.private_threadpool_size = 1``,
``options.threading.max_intra_op_parallelism = 1`` and one intra-op and inter-op thread, and
its batches are iterated as tensors (``for batch in dataset``). The rounds interleave the two
sides (hpcdist's three pipelines, then TF's, ``--rounds`` times) after one warm-up epoch each;
the JSON printed holds every round, the medians and hpcdist / tf.data ratios (above 1: hpcdist
is faster).

Usage: ``.venv/bin/python benchmarks/input_pipeline.py [--rounds 5] [--no-tf]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROWS, FEATURES, BATCH, BUFFER = 60_000, 784, 64, 10_000
PIPELINES = ("batch", "shuffle_batch", "map_batch")
ROOT = Path(__file__).resolve().parents[1]


def _data() -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((ROWS, FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, ROWS).astype(np.int64)
    return x, y


def _hpcdist_pipelines() -> dict[str, Any]:
    import hpcdist as hd

    x, y = _data()
    source = hd.data.Dataset.from_tensor_slices((x, y))
    return {
        "batch": source.batch(BATCH),
        "shuffle_batch": source.shuffle(BUFFER, seed=1).batch(BATCH),
        "map_batch": source.map(lambda a, b: (a * 2, b)).batch(BATCH),
    }


def _tf_pipelines() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    x, y = _data()
    source = tf.data.Dataset.from_tensor_slices((x, y))
    pipelines = {
        "batch": source.batch(BATCH),
        "shuffle_batch": source.shuffle(BUFFER, seed=1).batch(BATCH),
        "map_batch": source.map(lambda a, b: (a * 2, b)).batch(BATCH),
    }
    return {name: ds.with_options(options) for name, ds in pipelines.items()}


def _epoch(dataset: Any) -> float:
    """Batches per second over one full epoch."""
    start = time.perf_counter()
    count = 0
    for _ in dataset:
        count += 1
    return count / (time.perf_counter() - start)


def worker(side: str) -> None:
    """Answer one line per request on stdin: a pipeline name in, its batches/s out (JSON)."""
    pipelines = _hpcdist_pipelines() if side == "hpcdist" else _tf_pipelines()
    for dataset in pipelines.values():
        _epoch(dataset)  # warm-up: tracing, page faults, first shuffle buffer
    module = sys.modules["hpcdist" if side == "hpcdist" else "tensorflow"]
    print(json.dumps({"ready": side, "module": module.__file__}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            break
        print(json.dumps({"name": name, "batches_per_s": _epoch(pipelines[name])}), flush=True)


class _Worker:
    def __init__(self, python: str, side: str) -> None:
        self.process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", side],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )
        self.side = side
        self.module = self._reply()["module"]

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} worker ended (exit {self.process.wait()})")
        return json.loads(line)

    def measure(self, name: str) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()
        return float(self._reply()["batches_per_s"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> None:
    """Run the interleaved rounds and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hpcdist-python", default=sys.executable)
    parser.add_argument("--tf-python", default=str(ROOT / ".venv-conformance" / "bin" / "python"))
    parser.add_argument("--no-tf", action="store_true", help="measure hpcdist only")
    parser.add_argument("--worker", choices=("hpcdist", "tf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    workers = {"hpcdist": _Worker(args.hpcdist_python, "hpcdist")}
    if not args.no_tf:
        workers["tf"] = _Worker(args.tf_python, "tf")
    rounds: dict[str, dict[str, list[float]]] = {n: {s: [] for s in workers} for n in PIPELINES}
    for _ in range(args.rounds):
        for side, running in workers.items():
            for name in PIPELINES:
                rounds[name][side].append(running.measure(name))
    for running in workers.values():
        running.close()
    report: dict[str, Any] = {
        "rows": ROWS,
        "features": FEATURES,
        "batch_size": BATCH,
        "shuffle_buffer": BUFFER,
        "threads": 1,
        "rounds": args.rounds,
        "modules": {side: running.module for side, running in workers.items()},
        "pipelines": {},
    }
    for name in PIPELINES:
        entry: dict[str, Any] = {"rounds_batches_per_s": rounds[name]}
        for side in workers:
            entry[f"{side}_median_batches_per_s"] = round(statistics.median(rounds[name][side]), 1)
        if "tf" in workers:
            ratio = entry["hpcdist_median_batches_per_s"] / entry["tf_median_batches_per_s"]
            entry["ratio_hpcdist_over_tf"] = round(ratio, 2)
        report["pipelines"][name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
