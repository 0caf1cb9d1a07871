"""MNIST-shaped synthetic data: the stand-in for ``tf.keras.datasets.mnist`` and TFDS' mnist.

``load_data()`` returns ``(x_train, y_train), (x_test, y_test)`` as Keras' ``mnist.load_data()``
does: uint8 images of shape (n, 28, 28) with values 0-255 and uint8 labels 0-9. Each class is a
coarse random pattern (7x7 blocks blown up to 28x28) under heavy per-pixel noise, so a small
CNN learns it within a few epochs but not at once. numpy only, so the TensorFlow copies of the
tutorials load exactly the same arrays.
"""

from __future__ import annotations

import numpy as np

NUM_CLASSES = 10


def load_data(
    num_train: int = 512, num_test: int = 256, seed: int = 0
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Deterministic train and test splits.

    Args:
        num_train: Number of training examples.
        num_test: Number of test examples.
        seed: Seed of the class patterns and the noise.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``, images uint8 (n, 28, 28), labels uint8 (n,).
    """
    rng = np.random.default_rng(seed)
    patterns = np.kron(rng.random((NUM_CLASSES, 7, 7)), np.ones((4, 4)))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, NUM_CLASSES, n)
        images = 64 + 96 * patterns[labels] + rng.normal(0.0, 90.0, (n, 28, 28))
        return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.uint8)

    return split(num_train), split(num_test)
