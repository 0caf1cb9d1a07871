"""Train-step time and peak memory of three models, hpcdist against Keras 3 on TF CPU.

Run (from the peers' venv, see ``scripts/bench_peers.sh``): ``python benchmarks/peers/models.py
[--rounds 3] [--batches 32,128] [--models cnn,resnet20,transformer] [--baseline-tree DIR]
[--out r.json] [--plot r.png]``.

The models are the gallery's (``examples/models/architectures.py``, one builder for both
frameworks): the tutorials' MNIST CNN (28x28x1), ResNet-20 (32x32x3, BatchNormalization, Add,
GlobalAveragePooling2D) and the 2-block transformer encoder classifier (16 tokens, width 32).
One training step is what a custom loop runs: forward under a ``GradientTape``, sparse
categorical cross-entropy from logits, ``tape.gradient``, Adam's ``apply_gradients``, on the
same batch every step:

- ``hpcdist``: eager, numpy on OpenBLAS;
- ``tf``: Keras 3 on TF (``tf.function`` of the step, no XLA), oneDNN as TF ships it;
- ``hpcdist_baseline`` (with ``--baseline-tree DIR``): hpcdist from another source tree
  (``PYTHONPATH=DIR``), e.g. ``git archive`` of an earlier commit.

Every process runs one model at one batch size, one thread (OMP/MKL/OpenBLAS threads 1, TF's
intra- and inter-op pools 1). A round starts each contender once per (model, batch), the order
rotated by round. A worker runs ``--warmup`` steps, then times ``--steps`` steps one by one:
its figure is the median step (wall clock, and the process's CPU time beside it). Memory is
RSS from ``/proc/self/status``: the peak (``VmHWM``) at the end minus the RSS before the model
was built (imports and the batch excluded), i.e. what building and training the model added.
Medians over rounds; ratios are hpcdist / TF within a round, medians over rounds (below 1:
hpcdist is faster or smaller; targets: time <= 1.25, memory <= 1.5).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import bar_plot, driver_parser, emit, launch, machine, numpy_blas, write_result

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "models"))

from architectures import (  # noqa: E402  (the gallery's folder is put on the path first)
    build_mnist_cnn,
    build_resnet20,
    build_transformer_encoder,
    synthetic_images,
    synthetic_tokens,
)

WORKERS = ("hpcdist", "tf", "hpcdist_baseline")
MODELS = ("cnn", "resnet20", "transformer")
RATIO = "ratio = hpcdist / tf within a round (below 1: hpcdist is faster or smaller)"
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
}


def build(keras: Any, model: str) -> Any:
    """The model ``model`` in ``keras`` (``hpcdist.nn`` or Keras 3)."""
    if model == "cnn":
        return build_mnist_cnn(keras)
    if model == "resnet20":
        return build_resnet20(keras)
    if model == "transformer":
        return build_transformer_encoder(keras)
    raise ValueError(f"model must be one of {MODELS}, got {model!r}")


def batch(model: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch of the model's synthetic inputs and labels."""
    if model == "cnn":
        return synthetic_images(size, 28, channels=1, seed=0)
    if model == "resnet20":
        return synthetic_images(size, 32, seed=0)
    return synthetic_tokens(size, seed=0)


def rss_kib(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process, KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def time_steps(step: Any, args: argparse.Namespace) -> dict[str, float]:
    """Median wall and CPU seconds of one step over ``args.steps`` steps after a warm-up."""
    for _ in range(args.warmup):
        step()
    wall, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"step_s": float(np.median(wall)), "cpu_s": float(np.median(cpu))}


def hpcdist_step(model: str, x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
    """The training step of ``model`` in hpcdist (built with seed 0) on the batch ``(x, y)``."""
    import hpcdist as hd

    keras = hd.nn
    keras.set_random_seed(0)
    net = build(keras, model)
    opt = keras.optimizers.Adam()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step() -> None:
        with hd.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables, strict=True))

    return step


def worker_hpcdist(args: argparse.Namespace) -> None:
    import hpcdist as hd

    x, y = batch(args.model, args.batch)
    rss0 = rss_kib("VmRSS")
    figures = time_steps(hpcdist_step(args.model, x, y), args)
    figures["train_mib"] = (rss_kib("VmHWM") - rss0) / 1024
    blas = {"numpy": np.__version__, "hpcdist": os.path.dirname(hd.__file__), **numpy_blas()}
    write_result(args.result, {args.worker: figures, "blas": {args.worker: blas}})


def worker_tf(args: argparse.Namespace) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras

    x, y = batch(args.model, args.batch)
    rss0 = rss_kib("VmRSS")
    keras.utils.set_random_seed(0)
    model = build(keras, args.model)
    opt = keras.optimizers.Adam()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    xt, yt = tf.constant(x), tf.constant(y)

    @tf.function
    def step_fn(inputs: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    figures = time_steps(lambda: step_fn(xt, yt).numpy(), args)
    figures["train_mib"] = (rss_kib("VmHWM") - rss0) / 1024
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")
    blas = {"tensorflow": tf.__version__, "keras": keras.__version__, "onednn": onednn}
    write_result(args.result, {"tf": figures, "blas": {"tf": blas}})


def median_ratio(rounds: list[dict[str, dict]], name: str, key: str) -> float | None:
    ratios = [r[name][key] / r["tf"][key] for r in rounds if name in r and "tf" in r]
    return float(np.median(ratios)) if ratios else None


def summarise_case(rounds: list[dict[str, dict]], names: list[str]) -> dict[str, Any]:
    """Medians over rounds of each contender's figures, and its ratios to TF."""
    out: dict[str, Any] = {}
    for name in names:
        got = [r[name] for r in rounds if name in r]
        if not got:
            continue
        row: dict[str, Any] = {k: float(np.median([g[k] for g in got])) for k in got[0]}
        row["rounds"] = len(got)
        if name != "tf":
            for key, label in (("step_s", "time"), ("cpu_s", "cpu"), ("train_mib", "memory")):
                row[f"{label}_ratio"] = median_ratio(rounds, name, key)
        out[name] = row
    return out


def main() -> None:
    parser = driver_parser(__doc__, WORKERS, rounds=3)
    parser.add_argument("--model", choices=MODELS, help="(worker) the model to time")
    parser.add_argument("--batch", type=int, help="(worker) the batch size")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per worker")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--baseline-tree", help="another hpcdist source tree to time too")
    args = parser.parse_args()
    if args.worker:
        worker = worker_tf if args.worker == "tf" else worker_hpcdist
        worker(args)
        return

    names = ["hpcdist", "tf"] + (["hpcdist_baseline"] if args.baseline_tree else [])
    names = [n for n in names if n in args.workers.split(",")]
    cases = [(m, int(b)) for m in args.models.split(",") for b in args.batches.split(",")]
    rounds: dict[str, list[dict[str, dict]]] = {f"{m}/{b}": [] for m, b in cases}
    errors: list[str] = []
    blas: dict[str, Any] = {}
    for r in range(args.rounds):
        for model, size in cases:
            got: dict[str, dict] = {}
            k = r % len(names)
            for name in [*names[k:], *names[:k]]:
                env = dict(ONE_THREAD)
                if name == "hpcdist_baseline":
                    env["PYTHONPATH"] = os.path.abspath(args.baseline_tree)
                passed = ["--model", model, "--batch", str(size)]
                passed += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
                res = launch(__file__, name, passed, 1, args.timeout, env)
                if "error" in res:
                    errors.append(res["error"])
                    print(errors[-1], file=sys.stderr)
                    continue
                blas.update(res.get("blas", {}))
                got[name] = res[name]
            rounds[f"{model}/{size}"].append(got)
            print(f"round {r + 1}/{args.rounds} {model}/{size}: {got}", file=sys.stderr)
    contenders = {case: summarise_case(rs, names) for case, rs in rounds.items()}
    result = {
        "benchmark": "peers_models",
        "steps_per_worker": args.steps,
        "warmup_steps": args.warmup,
        "rounds": args.rounds,
        "ratio": RATIO,
        "memory": "MiB: peak RSS (VmHWM) at the end minus RSS before the model was built",
        "machine": machine(),
        "blas": blas,
        "cases": contenders,
        "errors": errors,
    }
    emit(result, args.out)
    if args.plot:
        bar_plot(
            args.plot,
            "Train step (GradientTape + Adam), one thread, median over rounds",
            "ms per step",
            {
                case: {n: 1e3 * row["step_s"] for n, row in rows.items()}
                for case, rows in contenders.items()
            },
            RATIO,
        )


if __name__ == "__main__":
    main()
