"""A 2-rank training run over TFRecord files much larger than memory needs: peak RSS, input share.

The driver writes two sets of TFRecord files of ``tf.train.Example`` records (a 784-float ``x``,
random, and an int64 label ``y`` from 0 to 9; 16 files each), a small one (``--small-mib``, 40)
and a large one (``--large-mib``, 4096), then trains on each once with ``mpiexec -n 2``:
``MultiWorkerMirroredStrategy``, ``list_files -> TFRecordDataset -> batch(256) ->
map(parse_example) -> prefetch(AUTOTUNE)`` auto-sharded by file (each rank reads 8 whole files),
one pass, a 784-128-10 MLP in a custom loop (``strategy.run`` of a GradientTape step, SGD).
Each rank reports its peak resident memory (``ru_maxrss``) and the run records a timeline
(``HPCDIST_TIMELINE``), whose ``input`` events give each rank's share of input waits in input +
step time (`hpcdist.cli.timeline_summary`). Printed as JSON: per run, records, steps,
seconds, records/s, peak RSS per rank, input share per rank; and the large run's RSS over the
small one's. The BLAS kernel numpy runs is named (``OPENBLAS_CORETYPE`` unchanged).

Usage: ``.venv/bin/python benchmarks/input_training.py [--small-mib 40] [--large-mib 4096]
[--dir /tmp] [--keep] [--out r.json]``
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

FILES, BATCH, FEATURES = 16, 256, 784
ROOT = Path(__file__).resolve().parents[1]


def write_files(directory: str, mib: int) -> int:
    """``FILES`` TFRecord files of about ``mib`` MiB of random examples; the record count."""
    import hpcdist.io as hdio

    rng = np.random.default_rng(mib)
    example = hdio.example_proto.Example()
    x = example.features.feature["x"].float_list.value
    y = example.features.feature["y"].int64_list.value
    x.extend(np.zeros(FEATURES, np.float32))
    y.append(0)
    size = len(example.SerializeToString()) + 16
    per_file = max(1, (mib << 20) // size // FILES)
    for k in range(FILES):
        with hdio.TFRecordWriter(os.path.join(directory, f"part-{k:02d}.tfrecord")) as writer:
            values = rng.standard_normal((per_file, FEATURES)).astype(np.float32)
            labels = rng.integers(0, 10, per_file)
            for row, label in zip(values, labels, strict=True):
                del x[:]
                x.extend(row)
                y[0] = int(label)
                writer.write(example.SerializeToString())
    return per_file * FILES


def worker(directory: str, out: str) -> None:
    """One rank of the training run; writes its figures to ``out``.RANK.json."""
    import hpcdist as hd

    strategy = hd.MultiWorkerMirroredStrategy()
    spec = {
        "x": hd.io.FixedLenFeature([FEATURES], hd.float32),
        "y": hd.io.FixedLenFeature([], hd.int64),
    }
    files = hd.data.Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
    dataset = (
        hd.data.TFRecordDataset(files)
        .batch(BATCH)
        .map(lambda r: hd.io.parse_example(r, spec))
        .prefetch(hd.data.AUTOTUNE)
    )
    hd.nn.set_random_seed(0)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(128, activation="relu", input_shape=(FEATURES,)),
                hd.nn.layers.Dense(10),
            ]
        )
        optimizer = hd.nn.optimizers.SGD(0.01)
    loss_object = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def step(batch: dict[str, Any]) -> Any:
        with hd.nn.GradientTape() as tape:
            per_example = loss_object(batch["y"], model(batch["x"], training=True))
            loss = hd.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    steps = 0
    t0 = time.perf_counter()
    for batch in strategy.experimental_distribute_dataset(dataset):
        strategy.run(step, args=(batch,))
        steps += 1
    seconds = time.perf_counter() - t0
    rank = strategy.extended.worker_index
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"rank": rank, "steps": steps, "seconds": seconds, "rss_mib": rss}, f)


def blas() -> str:
    """The BLAS numpy runs and the kernel OpenBLAS picked (as the environment pins it)."""
    try:
        from threadpoolctl import threadpool_info

        info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if info:
            return f"{info[0].get('internal_api')} {info[0].get('architecture')}"
    except ImportError:
        pass
    return f"numpy BLAS; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')}"


def run(directory: str, records: int, mib: int) -> dict[str, Any]:
    """Train on ``directory`` with 2 ranks; its figures."""
    out = os.path.join(directory, "result")
    trace = os.path.join(directory, "trace.json")
    env = dict(os.environ, HPCDIST_TIMELINE=trace, OMP_NUM_THREADS="1")
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
    command = [mpiexec, "-n", "2", sys.executable, __file__, "--worker", directory, out]
    t0 = time.perf_counter()
    subprocess.run(command, check=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    ranks = [json.loads(Path(p).read_text()) for p in sorted(glob.glob(f"{out}.*.json"))]
    from hpcdist.cli.timeline_summary import load_trace, summarize

    waits = summarize(load_trace(trace))["input"]
    seconds = max(r["seconds"] for r in ranks)
    return {
        "mib": mib,
        "records": records,
        "steps": [r["steps"] for r in ranks],
        "seconds": seconds,
        "wall_s": wall,
        "records_per_s": records / seconds,
        "rss_mib": [r["rss_mib"] for r in ranks],
        "input_share": [waits[r]["share"] for r in sorted(waits)],
        "input_s": [waits[r]["input_s"] for r in sorted(waits)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-mib", type=int, default=40)
    parser.add_argument("--large-mib", type=int, default=4096)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    results = {}
    for name, mib in (("small", args.small_mib), ("large", args.large_mib)):
        directory = tempfile.mkdtemp(prefix=f"hpcdist-input-{name}-", dir=args.dir)
        try:
            t0 = time.perf_counter()
            records = write_files(directory, mib)
            written = time.perf_counter() - t0
            results[name] = run(directory, records, mib)
            results[name]["write_s"] = written
        finally:
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
    small, large = results["small"]["rss_mib"], results["large"]["rss_mib"]
    growth = [b - a for a, b in zip(small, large, strict=True)]
    doc = {
        "benchmark": "input_training",
        "pipeline": "list_files -> TFRecordDataset -> batch(256) -> map(parse_example) -> "
        "prefetch(AUTOTUNE), FILE-sharded over 2 ranks; 784-128-10 MLP, SGD",
        "blas": blas(),
        "runs": results,
        "rss_growth_mib": growth,
        "load_avg_1min": os.getloadavg()[0],
    }
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
