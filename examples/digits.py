"""Handwritten digits (scikit-learn's bundled 8x8 images) with MultiWorkerMirroredStrategy.

Run: ``mpiexec -n 4 python examples/digits.py`` (the README's demo; any number of ranks, or
plain ``python``). Every rank loads the same data; each global batch of 64 images is split
across the ranks, gradients are all-reduced every step, and the chief shows a progress bar and
the final test accuracy. Nothing is downloaded: the images ship inside scikit-learn.
"""

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits

import hpcdist as hd


def load(seed: int = 0):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--verbose", type=int, default=1)
    args = parser.parse_args()

    strategy = hd.MultiWorkerMirroredStrategy()
    (x_train, y_train), (x_test, y_test) = load()
    hd.nn.set_random_seed(42)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(128, activation="relu", input_shape=(64,)),
                hd.nn.layers.Dropout(0.1, seed=7),
                hd.nn.layers.Dense(64, activation="relu"),
                hd.nn.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=hd.nn.optimizers.Adam(2e-3),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    start = time.perf_counter()
    model.fit(
        x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=args.verbose
    )
    elapsed = time.perf_counter() - start
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=256)
    if strategy.extended.should_checkpoint:
        print(
            f"digits: {strategy.num_replicas_in_sync} replica(s), {args.epochs} epochs in "
            f"{elapsed:.1f} s; test loss {loss:.4f}, test accuracy {accuracy:.4f}"
        )


if __name__ == "__main__":
    main()
